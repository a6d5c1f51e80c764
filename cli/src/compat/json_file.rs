//! Reading a settings file that must hold one JSON object (the process-library bindings, the
//! compression settings, profiles): absent is `None`; unreadable, not JSON or not an object is
//! an error naming the file, so a command never silently replaces what it could not read.

use std::path::Path;

use serde_json::{Map, Value};

use crate::compat::output;

/// The object in `path`, `None` when there is no such file.
pub fn read_object(path: &Path) -> Result<Option<Map<String, Value>>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(output::io_message("open", path, &e)),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(Some(m)),
        Ok(_) => Err(format!("{} is not a JSON object", path.display())),
        Err(e) => Err(format!("{} is not valid JSON ({e})", path.display())),
    }
}
