//! A snapshot of environment variables, read once at the edge of the program.
//!
//! Library code never calls `std::env::var`: `main` takes [`EnvMap::from_process`] and passes it
//! down (config loading, telemetry), and tests build an [`EnvMap`] from pairs.

use std::collections::BTreeMap;

/// Environment variables by name. Cheap to build from any iterator of pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvMap(BTreeMap<String, String>);

impl EnvMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current process's environment; variables whose name or value is not UTF-8 are skipped.
    /// Call this once, in `main`.
    pub fn from_process() -> Self {
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect()
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The value of `name` when it is set and not blank.
    pub fn get_non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.trim().is_empty())
    }

    /// Sets `name` (builder style, for tests and composition roots).
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.insert(name.into(), value.into());
        self
    }

    /// Sets `name`.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.insert(name.into(), value.into());
    }

    /// All variables, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for EnvMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

impl<K: Into<String>, V: Into<String>> Extend<(K, V)> for EnvMap {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        self.0
            .extend(iter.into_iter().map(|(k, v)| (k.into(), v.into())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_from_pairs_and_reads_back() {
        let env: EnvMap = [("A", "1"), ("B", " ")].into_iter().collect();
        assert_eq!(env.get("A"), Some("1"));
        assert_eq!(env.get_non_empty("B"), None);
        assert_eq!(env.get("C"), None);
        let env = env.with("C", "3");
        assert_eq!(
            env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["A", "B", "C"]
        );
    }
}
