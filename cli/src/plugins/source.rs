//! The plugin source (`plugins/babysitter/`), embedded at build time (`build.rs`), and its
//! manifest: what the plugin is called, which skills and commands it has, and which native hook
//! events each harness registers. Text files are templates: `{{name}}` is replaced by the
//! harness's value, and a placeholder nobody fills is an error, not a literal left in a bundle.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::harness::Harness;

include!(concat!(env!("OUT_DIR"), "/plugin_source.rs"));

/// What can be wrong with the plugin source (a build of this binary carries a broken one only
/// if its tests were not run; the errors say exactly where).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("plugins/babysitter/{0} is missing")]
    Missing(String),
    #[error("plugins/babysitter/plugin.json: {0}")]
    Manifest(String),
    #[error("plugins/babysitter/{file}: {what}")]
    Template { file: String, what: String },
}

/// `plugin.json` of the source.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub description: String,
    pub author: String,
    pub license: String,
    pub homepage: String,
    pub skills: Vec<String>,
    pub commands: Vec<String>,
    pub harnesses: BTreeMap<String, HarnessEntry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessEntry {
    /// Native event names this harness registers.
    pub hooks: Vec<String>,
}

/// One source file's bytes.
pub fn file(path: &str) -> Result<&'static [u8], SourceError> {
    FILES
        .iter()
        .find(|(p, _, _)| *p == path)
        .map(|(_, b, _)| *b)
        .ok_or_else(|| SourceError::Missing(path.to_owned()))
}

/// One source file as text.
pub fn text(path: &str) -> Result<&'static str, SourceError> {
    std::str::from_utf8(file(path)?).map_err(|e| SourceError::Template {
        file: path.to_owned(),
        what: format!("not UTF-8: {e}"),
    })
}

impl Manifest {
    /// The embedded manifest, checked against the harness table and the source files.
    pub fn load() -> Result<Manifest, SourceError> {
        let m: Manifest = serde_json::from_slice(file("plugin.json")?)
            .map_err(|e| SourceError::Manifest(e.to_string()))?;
        for (key, entry) in &m.harnesses {
            let h = Harness::parse(key).ok_or_else(|| {
                SourceError::Manifest(format!(
                    "harnesses.{key}: not a harness this build knows ({})",
                    Harness::keys()
                ))
            })?;
            for name in &entry.hooks {
                if h.event(name).is_none() {
                    let known: Vec<&str> = h.events().iter().map(|e| e.name).collect();
                    return Err(SourceError::Manifest(format!(
                        "harnesses.{key}.hooks: {name:?} is not a {} event this build knows ({})",
                        h.label(),
                        known.join(", ")
                    )));
                }
            }
        }
        for h in Harness::ALL {
            if !m.harnesses.contains_key(h.key()) {
                return Err(SourceError::Manifest(format!(
                    "harnesses: {} is missing",
                    h.key()
                )));
            }
        }
        for s in &m.skills {
            file(&format!("skills/{s}/SKILL.md"))?;
        }
        for c in &m.commands {
            file(&format!("commands/{c}.md"))?;
        }
        Ok(m)
    }

    pub fn hooks_of(&self, h: Harness) -> &[String] {
        self.harnesses
            .get(h.key())
            .map(|e| e.hooks.as_slice())
            .unwrap_or_default()
    }
}

/// `template` with every `{{name}}` replaced from `vars`; an unknown or unclosed placeholder is
/// an error naming the file.
pub fn render(file: &str, template: &str, vars: &[(&str, &str)]) -> Result<String, SourceError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(SourceError::Template {
                file: file.to_owned(),
                what: "a `{{` is never closed".into(),
            });
        };
        let name = after[..end].trim();
        let value = vars
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| SourceError::Template {
                file: file.to_owned(),
                what: format!("unknown placeholder {{{{{name}}}}}"),
            })?;
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_manifest_is_valid() {
        let m = Manifest::load().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.name, "babysitter");
        assert_eq!(m.commands.len(), 12);
    }

    #[test]
    fn placeholders_are_filled_or_refused() {
        assert_eq!(
            render("f", "a {{x}} b {{ y }}", &[("x", "1"), ("y", "2")]).ok(),
            Some("a 1 b 2".to_owned())
        );
        let e = render("f.md", "{{nope}}", &[]).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("plugins/babysitter/f.md: unknown placeholder {{nope}}")
        );
        assert!(render("f", "{{open", &[]).is_err());
    }

    #[test]
    fn nothing_in_the_source_installs_or_calls_another_babysitter() {
        for (path, bytes, _) in FILES {
            let text = String::from_utf8_lossy(bytes);
            for banned in ["npm i", "npm install", "npx", "@a5c-ai/babysitter-sdk"] {
                assert!(
                    !text.contains(banned),
                    "plugins/babysitter/{path} mentions {banned:?}"
                );
            }
        }
    }
}
