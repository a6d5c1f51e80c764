//! Secret redaction: known secret values never reach the journal.
//!
//! A [`Redactor`] holds named secrets (API keys, tokens) that a deployment knows about. The
//! journal applies it to every event's data before sealing and to every run file before
//! storing, replacing each occurrence of a secret's value with `[REDACTED:<name>]`; services
//! apply it to whatever else they relay (agent events). Processes should not put secret values
//! in task definitions at all: they write a placeholder `{"$secret": "NAME"}`, which is stored as
//! is and resolved ([`Redactor::resolve_placeholders`]) only in the task a worker receives over
//! its authenticated channel.
//!
//! Values shorter than [`MIN_SECRET_LEN`] are refused: redacting a 3-character "secret" would
//! rewrite unrelated text everywhere.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde_json::Value;

/// Shortest secret value accepted.
pub const MIN_SECRET_LEN: usize = 8;

/// Named secret values to keep out of stored and relayed data.
#[derive(Clone, Default)]
pub struct Redactor {
    /// (name, value), longest value first so overlapping secrets redact fully.
    secrets: Vec<(String, String)>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field(
                "secrets",
                &self.secrets.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactError {
    #[error("secret {name} is shorter than {MIN_SECRET_LEN} characters")]
    TooShort { name: String },
    #[error("task definition refers to secret `{0}`, which this orchestrator does not have")]
    Unknown(String),
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = (String, String)>) -> Result<Self, RedactError> {
        let mut secrets: Vec<(String, String)> = secrets.into_iter().collect();
        if let Some((name, _)) = secrets.iter().find(|(_, v)| v.len() < MIN_SECRET_LEN) {
            return Err(RedactError::TooShort { name: name.clone() });
        }
        secrets.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        Ok(Self { secrets })
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every secret value replaced.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (name, value) in &self.secrets {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), &format!("[REDACTED:{name}]")));
            }
        }
        out
    }

    /// Redacts every string (keys included) of a JSON value in place; true when anything changed.
    pub fn value(&self, v: &mut Value) -> bool {
        if self.secrets.is_empty() {
            return false;
        }
        match v {
            Value::String(s) => match self.text(s) {
                Cow::Owned(o) => {
                    *s = o;
                    true
                }
                Cow::Borrowed(_) => false,
            },
            Value::Array(items) => items.iter_mut().fold(false, |acc, x| self.value(x) | acc),
            Value::Object(map) => {
                let dirty_key = map.keys().any(|k| matches!(self.text(k), Cow::Owned(_)));
                if dirty_key {
                    let old = std::mem::take(map);
                    for (k, mut x) in old {
                        self.value(&mut x);
                        map.insert(self.text(&k).into_owned(), x);
                    }
                    true
                } else {
                    map.values_mut().fold(false, |acc, x| self.value(x) | acc)
                }
            }
            _ => false,
        }
    }

    /// Redacts stored bytes: JSON is redacted value by value (so escapes inside strings are
    /// handled), other UTF-8 text as text, anything else byte for byte.
    pub fn bytes(&self, content: Bytes) -> Bytes {
        if self.secrets.is_empty() {
            return content;
        }
        if let Ok(text) = std::str::from_utf8(&content) {
            if let Ok(mut v) = serde_json::from_str::<Value>(text) {
                if self.value(&mut v) {
                    return Bytes::from(v.to_string());
                }
                // Secrets written with JSON escapes inside strings are caught above; a raw
                // occurrence elsewhere cannot exist in valid JSON.
                return content;
            }
            return match self.text(text) {
                Cow::Owned(o) => Bytes::from(o),
                Cow::Borrowed(_) => content,
            };
        }
        let mut out = content.to_vec();
        for (name, value) in &self.secrets {
            out = replace_bytes(
                &out,
                value.as_bytes(),
                format!("[REDACTED:{name}]").as_bytes(),
            );
        }
        Bytes::from(out)
    }

    /// Replaces every `{"$secret": "NAME"}` object in `v` with the secret's value.
    pub fn resolve_placeholders(&self, v: &mut Value) -> Result<(), RedactError> {
        match v {
            Value::Object(map) if map.len() == 1 => {
                if let Some(Value::String(name)) = map.get("$secret") {
                    let value = self
                        .secrets
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                        .ok_or_else(|| RedactError::Unknown(name.clone()))?;
                    *v = Value::String(value);
                    return Ok(());
                }
                map.values_mut()
                    .try_for_each(|x| self.resolve_placeholders(x))
            }
            Value::Object(map) => map
                .values_mut()
                .try_for_each(|x| self.resolve_placeholders(x)),
            Value::Array(items) => items
                .iter_mut()
                .try_for_each(|x| self.resolve_placeholders(x)),
            _ => Ok(()),
        }
    }
}

fn replace_bytes(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return haystack.to_vec();
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {

    /// The runs root inside a test's temporary directory: a runs root's parent receives babysitter's
    /// `package.json`, which must land in the temporary directory, not in `/tmp`.
    fn runs(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("runs")
    }

    use serde_json::json;

    use super::*;

    fn r() -> Redactor {
        Redactor::new([
            ("API_KEY".to_owned(), "sk-live-1234567890".to_owned()),
            ("TOKEN".to_owned(), "tok_abcdefgh".to_owned()),
        ])
        .unwrap()
    }

    #[test]
    fn redacts_text_json_and_bytes() {
        let r = r();
        assert_eq!(
            r.text("key=sk-live-1234567890 and tok_abcdefgh"),
            "key=[REDACTED:API_KEY] and [REDACTED:TOKEN]"
        );
        let mut v = json!({"cmd": "curl -H 'x: sk-live-1234567890'", "n": [1, "tok_abcdefgh"], "sk-live-1234567890": 1});
        assert!(r.value(&mut v));
        let s = v.to_string();
        assert!(!s.contains("sk-live") && !s.contains("tok_abc"), "{s}");
        assert!(s.contains("[REDACTED:API_KEY]"));
        let b = r.bytes(Bytes::from_static(b"log: sk-live-1234567890\n"));
        assert_eq!(&b[..], b"log: [REDACTED:API_KEY]\n");
        let bin = r.bytes(Bytes::from(
            [&[0xff_u8, 0xfe][..], b"tok_abcdefgh"].concat(),
        ));
        assert!(!bin.windows(12).any(|w| w == b"tok_abcdefgh"));
        let clean = Bytes::from_static(b"{\"a\":1}");
        assert_eq!(r.bytes(clean.clone()), clean);
    }

    #[test]
    fn resolves_placeholders_and_refuses_unknown_or_short_secrets() {
        let r = r();
        let mut v = json!({"env": {"KEY": {"$secret": "API_KEY"}}, "x": [{"$secret": "TOKEN"}]});
        r.resolve_placeholders(&mut v).unwrap();
        assert_eq!(
            v,
            json!({"env": {"KEY": "sk-live-1234567890"}, "x": ["tok_abcdefgh"]})
        );
        let mut bad = json!({"$secret": "NOPE"});
        assert_eq!(
            r.resolve_placeholders(&mut bad),
            Err(RedactError::Unknown("NOPE".into()))
        );
        assert!(Redactor::new([("S".to_owned(), "short".to_owned())]).is_err());
        assert!(!format!("{r:?}").contains("sk-live"));
    }

    /// Run files given as bytes or as documents are stored redacted alike.
    #[tokio::test]
    async fn run_files_are_stored_redacted_whichever_way_they_come() {
        use crate::store::{RunFile, RunFiles};
        use crate::{Journal, JournalOptions};
        let dir = tempfile::tempdir().unwrap();
        let options = JournalOptions {
            redactor: Some(std::sync::Arc::new(r())),
            ..Default::default()
        };
        let j = Journal::new(
            std::sync::Arc::new(crate::fs::FsStore::new(runs(&dir))),
            options,
        );
        let run_files = RunFiles {
            run_json: json!({"runId": "r1"}),
            inputs_json: None,
        };
        j.create_run("r1", run_files).await.unwrap();
        let doc = json!({"shell": {"command": "curl -H 'x: sk-live-1234567890'"}});
        let as_doc = RunFile::task("e1", "task.json").unwrap();
        let as_bytes = RunFile::task("e2", "task.json").unwrap();
        j.put_run_json_files("r1", vec![(as_doc.clone(), doc.clone())])
            .await
            .unwrap();
        j.put_run_files("r1", vec![(as_bytes.clone(), Bytes::from(doc.to_string()))])
            .await
            .unwrap();
        let streamed = RunFile::task("e3", "task.json").unwrap();
        let mut stream = j.stream_run_json_files("r1").unwrap();
        stream.push(streamed.clone(), doc.clone());
        let returned = stream.finish().await.unwrap();
        let stored = j.get_run_file("r1", &as_doc).await.unwrap();
        assert_eq!(stored, j.get_run_file("r1", &as_bytes).await.unwrap());
        assert_eq!(stored, j.get_run_file("r1", &streamed).await.unwrap());
        assert_eq!(returned, vec![stored.clone()]);
        let text = String::from_utf8(stored.to_vec()).unwrap();
        assert!(
            text.contains("[REDACTED:API_KEY]") && !text.contains("sk-live"),
            "{text}"
        );
    }
}
