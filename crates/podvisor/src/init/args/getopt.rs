//! The one getopt scanner of the tini and dumb-init personas: glibc's `getopt` /
//! `getopt_long` as those programs call it. Short options cluster (`-sv`), a value is attached
//! (`-e5`) or the next argument (`-e 5`), `--` ends the options, long options take any
//! unambiguous prefix and `--name=value`. With `permute` (tini, unless POSIXLY_CORRECT)
//! operands may come between options and are moved after them; without it (dumb-init) the
//! first operand ends the options.
//!
//! It only walks: what an option means, and how an error is worded, is each persona's.

use std::ffi::OsString;

/// One option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Opt {
    Short(char, Option<String>),
    Long(&'static str, Option<String>),
}

/// What getopt would complain about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GetoptError {
    /// `-x` that the option string does not know.
    Invalid(char),
    /// `-e` at the end, without its value.
    MissingShort(char),
    /// `--name` that no long option starts with.
    UnknownLong(String),
    /// `--na` that several long options start with.
    Ambiguous(String),
    /// `--rewrite` at the end, without its value.
    MissingLong(&'static str),
}

#[derive(Debug)]
pub(super) struct Getopt<'a> {
    args: &'a [OsString],
    /// Short options and whether each takes a value.
    shorts: &'static [(char, bool)],
    /// Long options and whether each takes a value; empty: `--x` is read as letters.
    longs: &'static [(&'static str, bool)],
    permute: bool,
    i: usize,
    /// The letters of the cluster being read, and the next one's index.
    cluster: Option<(Vec<char>, usize)>,
    /// Operands moved aside while permuting.
    operands: Vec<OsString>,
    done: bool,
}

impl<'a> Getopt<'a> {
    pub(super) fn new(
        args: &'a [OsString],
        shorts: &'static [(char, bool)],
        longs: &'static [(&'static str, bool)],
        permute: bool,
    ) -> Getopt<'a> {
        Getopt {
            args,
            shorts,
            longs,
            permute,
            i: 0,
            cluster: None,
            operands: Vec::new(),
            done: false,
        }
    }

    /// The operands: those moved aside, then everything after the options.
    pub(super) fn operands(self) -> Vec<OsString> {
        let mut out = self.operands;
        out.extend_from_slice(&self.args[self.i.min(self.args.len())..]);
        out
    }

    /// The next argument as a value, if there is one.
    fn take_next(&mut self) -> Option<String> {
        let v = self.args.get(self.i)?.to_string_lossy().into_owned();
        self.i += 1;
        Some(v)
    }

    fn short(&mut self) -> Option<Result<Opt, GetoptError>> {
        let (letters, j) = self.cluster.as_mut()?;
        let Some(&ch) = letters.get(*j) else {
            self.cluster = None;
            return None;
        };
        *j += 1;
        let takes_value = match self.shorts.iter().find(|(c, _)| *c == ch) {
            None => return Some(Err(GetoptError::Invalid(ch))),
            Some((_, v)) => *v,
        };
        if !takes_value {
            return Some(Ok(Opt::Short(ch, None)));
        }
        let attached: String = letters[*j..].iter().collect();
        self.cluster = None;
        let value = if attached.is_empty() {
            match self.take_next() {
                Some(v) => v,
                None => return Some(Err(GetoptError::MissingShort(ch))),
            }
        } else {
            attached
        };
        Some(Ok(Opt::Short(ch, Some(value))))
    }

    fn long(&mut self, body: &str) -> Result<Opt, GetoptError> {
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let matches: Vec<&(&'static str, bool)> = self
            .longs
            .iter()
            .filter(|(n, _)| n.starts_with(name))
            .collect();
        let &(full, takes_value) = match matches.as_slice() {
            [one] => *one,
            _ => match self.longs.iter().find(|(n, _)| *n == name) {
                Some(exact) => exact,
                None if matches.is_empty() => return Err(GetoptError::UnknownLong(name.into())),
                None => return Err(GetoptError::Ambiguous(name.into())),
            },
        };
        if !takes_value {
            return Ok(Opt::Long(full, None));
        }
        match inline.or_else(|| self.take_next()) {
            Some(v) => Ok(Opt::Long(full, Some(v))),
            None => Err(GetoptError::MissingLong(full)),
        }
    }
}

impl Iterator for Getopt<'_> {
    type Item = Result<Opt, GetoptError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(next) = self.short() {
                return Some(next);
            }
            if self.done {
                return None;
            }
            let raw = self.args.get(self.i)?;
            let arg = raw.to_string_lossy().into_owned();
            if arg == "--" {
                self.i += 1;
                self.done = true;
                return None;
            }
            if !arg.starts_with('-') || arg == "-" {
                if !self.permute {
                    self.done = true;
                    return None;
                }
                self.operands.push(raw.clone());
                self.i += 1;
                continue;
            }
            self.i += 1;
            if let (Some(body), false) = (arg.strip_prefix("--"), self.longs.is_empty()) {
                return Some(self.long(body));
            }
            self.cluster = Some((arg[1..].chars().collect(), 0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORTS: &[(char, bool)] = &[('s', false), ('v', false), ('e', true)];
    const LONGS: &[(&str, bool)] = &[("verbose", false), ("version", false), ("rewrite", true)];

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn scan(
        args: &[&str],
        longs: &'static [(&'static str, bool)],
        permute: bool,
    ) -> (Vec<Result<Opt, GetoptError>>, Vec<OsString>) {
        let args = os(args);
        let mut g = Getopt::new(&args, SHORTS, longs, permute);
        let opts: Vec<_> = g.by_ref().collect();
        (opts, g.operands())
    }

    #[test]
    fn clusters_values_and_the_end_of_options() {
        let (opts, rest) = scan(&["-sv", "-e5", "-e", "6", "--", "-v", "cmd"], &[], true);
        assert_eq!(
            opts,
            [
                Ok(Opt::Short('s', None)),
                Ok(Opt::Short('v', None)),
                Ok(Opt::Short('e', Some("5".into()))),
                Ok(Opt::Short('e', Some("6".into()))),
            ]
        );
        assert_eq!(rest, os(&["-v", "cmd"]));
    }

    #[test]
    fn permuting_or_not() {
        let (opts, rest) = scan(&["cmd", "-s", "arg"], &[], true);
        assert_eq!(opts, [Ok(Opt::Short('s', None))]);
        assert_eq!(rest, os(&["cmd", "arg"]));
        let (opts, rest) = scan(&["cmd", "-s", "arg"], &[], false);
        assert!(opts.is_empty());
        assert_eq!(rest, os(&["cmd", "-s", "arg"]));
    }

    #[test]
    fn long_options_by_unambiguous_prefix() {
        let (opts, rest) = scan(
            &["--rew=15:2", "--verb", "--rewrite", "1:2", "x"],
            LONGS,
            false,
        );
        assert_eq!(
            opts,
            [
                Ok(Opt::Long("rewrite", Some("15:2".into()))),
                Ok(Opt::Long("verbose", None)),
                Ok(Opt::Long("rewrite", Some("1:2".into()))),
            ]
        );
        assert_eq!(rest, os(&["x"]));
        assert_eq!(
            scan(&["--ver"], LONGS, false).0,
            [Err(GetoptError::Ambiguous("ver".into()))]
        );
        assert_eq!(
            scan(&["--bogus"], LONGS, false).0,
            [Err(GetoptError::UnknownLong("bogus".into()))]
        );
        assert_eq!(
            scan(&["--rewrite"], LONGS, false).0,
            [Err(GetoptError::MissingLong("rewrite"))]
        );
        assert_eq!(
            scan(&["-e"], &[], false).0,
            [Err(GetoptError::MissingShort('e'))]
        );
        assert_eq!(
            scan(&["-x"], &[], false).0,
            [Err(GetoptError::Invalid('x'))]
        );
    }
}
