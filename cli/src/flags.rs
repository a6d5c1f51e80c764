//! The flag grammar of babysitter-rs's own commands (`babysitter run`, `babysitter up`,
//! `run:cancel --server`): `--flag value`, `--flag=value`, bare switches and positionals, each
//! command matching the names it knows. One lexer so the three accept the same forms and say
//! the same thing about a missing value. (babysitter's own `noun:verb` commands keep
//! `compat::args`, the reference's hand-kept grammar, which tolerates what the reference does.)

/// One command-line item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg<'a> {
    /// `--name` or `-n`, without any `=value` (see [`Flags::value`]).
    Flag(&'a str),
    Positional(&'a str),
}

/// Walks `argv` item by item; a flag's value is taken with [`Flags::value`].
#[derive(Debug)]
pub struct Flags<'a> {
    it: std::slice::Iter<'a, String>,
    /// The `=value` of the flag just returned.
    inline: Option<&'a str>,
}

impl<'a> Flags<'a> {
    pub fn new(argv: &'a [String]) -> Self {
        Self {
            it: argv.iter(),
            inline: None,
        }
    }

    /// The next item; `--name=value` comes as `Flag("--name")` with its value kept for
    /// [`Flags::value`].
    pub fn next_arg(&mut self) -> Option<Arg<'a>> {
        self.inline = None;
        let a = self.it.next()?.as_str();
        if a.starts_with("--")
            && let Some((flag, v)) = a.split_once('=')
        {
            self.inline = Some(v);
            return Some(Arg::Flag(flag));
        }
        Some(if a.starts_with('-') && a.len() > 1 {
            Arg::Flag(a)
        } else {
            Arg::Positional(a)
        })
    }

    /// The value of the flag just returned (`flag`): its `=value`, else the next item.
    pub fn value(&mut self, flag: &str) -> Result<String, String> {
        match self.inline.take() {
            Some(v) => Ok(v.to_owned()),
            None => self
                .it
                .next()
                .cloned()
                .ok_or_else(|| format!("{flag} requires a value")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn flags_values_switches_and_positionals() {
        let a = argv(&[
            "p.mjs",
            "--inputs",
            "i.json",
            "--set=a.b=c",
            "-y",
            "--json",
            "-",
        ]);
        let mut f = Flags::new(&a);
        assert_eq!(f.next_arg(), Some(Arg::Positional("p.mjs")));
        assert_eq!(f.next_arg(), Some(Arg::Flag("--inputs")));
        assert_eq!(f.value("--inputs").as_deref(), Ok("i.json"));
        assert_eq!(f.next_arg(), Some(Arg::Flag("--set")));
        assert_eq!(
            f.value("--set").as_deref(),
            Ok("a.b=c"),
            "the first `=` splits"
        );
        assert_eq!(f.next_arg(), Some(Arg::Flag("-y")));
        assert_eq!(f.next_arg(), Some(Arg::Flag("--json")));
        assert_eq!(
            f.next_arg(),
            Some(Arg::Positional("-")),
            "`-` is stdin, a positional"
        );
        assert_eq!(f.next_arg(), None);
    }

    #[test]
    fn a_missing_value_names_the_flag_and_an_inline_value_does_not_leak() {
        let a = argv(&["--x=1", "--data-dir"]);
        let mut f = Flags::new(&a);
        assert_eq!(f.next_arg(), Some(Arg::Flag("--x")));
        // Not asked for: the next item is still the next item.
        assert_eq!(f.next_arg(), Some(Arg::Flag("--data-dir")));
        assert_eq!(
            f.value("--data-dir"),
            Err("--data-dir requires a value".to_owned())
        );
    }
}
