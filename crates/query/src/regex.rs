//! `$regex` on a linear-time engine, with size limits and a clear refusal of backtracking syntax.
//!
//! MongoDB uses PCRE; Herald uses the `regex` crate, whose matching time is linear in the input.
//! Features that need backtracking (look-around, backreferences) are refused with
//! `unsupported_regex` rather than silently reinterpreted.

use crate::error::QueryError;
use crate::limits::{REGEX_BYTES_MAX, REGEX_COMPILED_BYTES_MAX, REGEX_DFA_BYTES_MAX};
use regex_syntax::ast::{parse::ParserBuilder, ErrorKind};

#[derive(Debug, Clone)]
pub struct Pattern {
    pub source: String,
    pub options: String,
    pub regex: regex::Regex,
    /// PCRE's `$` (without `m`) also matches before a newline that ends the subject; the regex
    /// crate's does not. When the pattern uses `$` in that mode, a subject ending in "\n" is
    /// also tried without it.
    dollar_before_final_newline: bool,
    /// A pattern that starts with `^` and a literal (`^user42`) can only match subjects that
    /// start with that literal: a byte comparison rejects the rest without running the regex.
    /// Live queries evaluate such filters against every write, so this is their hot path.
    prefix: Option<Vec<u8>>,
    /// The pattern is exactly `^literal`: the prefix comparison is the whole answer.
    prefix_only: bool,
}

impl Pattern {
    pub fn compile(path: &str, source: &str, options: &str) -> Result<Pattern, QueryError> {
        if source.len() > REGEX_BYTES_MAX {
            return Err(QueryError::LimitExceeded(format!(
                "regular expression at '{path}' is longer than {REGEX_BYTES_MAX} bytes"
            )));
        }
        let (mut i, mut m, mut s, mut x) = (false, false, false, false);
        for c in options.chars() {
            match c {
                'i' => i = true,
                'm' => m = true,
                's' => s = true,
                'x' => x = true,
                other => {
                    return Err(QueryError::BadRegex {
                        path: path.to_string(),
                        reason: format!("unknown $options flag '{other}' (allowed: i m s x)"),
                    })
                }
            }
        }
        // Parse the syntax first so unsupported features get their own code.
        let ast = ParserBuilder::new()
            .ignore_whitespace(x)
            .build()
            .parse(source);
        if let Err(e) = &ast {
            let unsupported = matches!(
                e.kind(),
                ErrorKind::UnsupportedLookAround | ErrorKind::UnsupportedBackreference
            );
            let reason = e.kind().to_string();
            return Err(if unsupported {
                QueryError::UnsupportedRegex {
                    path: path.to_string(),
                    reason: format!("{reason} (Herald's regex engine runs in linear time)"),
                }
            } else {
                QueryError::BadRegex {
                    path: path.to_string(),
                    reason,
                }
            });
        }
        let regex = regex::RegexBuilder::new(source)
            .case_insensitive(i)
            .multi_line(m)
            .dot_matches_new_line(s)
            .ignore_whitespace(x)
            .size_limit(REGEX_COMPILED_BYTES_MAX)
            .dfa_size_limit(REGEX_DFA_BYTES_MAX)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => QueryError::LimitExceeded(format!(
                    "regular expression at '{path}' compiles to more than {REGEX_COMPILED_BYTES_MAX} bytes"
                )),
                other => QueryError::BadRegex {
                    path: path.to_string(),
                    reason: other.to_string(),
                },
            })?;
        let dollar_before_final_newline = !m && ast.as_ref().is_ok_and(uses_end_line);
        let (prefix, prefix_only) = anchored_prefix(source, i, m, s, x);
        Ok(Pattern {
            source: source.to_string(),
            options: options.to_string(),
            regex,
            dollar_before_final_newline,
            prefix,
            prefix_only,
        })
    }

    /// The literal every matching string starts with, for a pattern of the form
    /// `^literal...` without flags that change what the literal means (see `anchored_prefix`).
    pub fn literal_prefix(&self) -> Option<&[u8]> {
        self.prefix.as_deref().filter(|p| !p.is_empty())
    }

    #[inline]
    pub fn is_match(&self, s: &str) -> bool {
        if let Some(p) = &self.prefix {
            // With `$` before a final newline, the shorter subject must start with the prefix
            // too, so the check holds for both tries.
            if !s.as_bytes().starts_with(p) {
                return false;
            }
            if self.prefix_only {
                return true;
            }
        }
        self.regex.is_match(s)
            || (self.dollar_before_final_newline
                && s.ends_with('\n')
                && self.regex.is_match(&s[..s.len() - 1]))
    }
}

/// The literal every match must start with, for a pattern of the form `^literal...` (start of
/// text, not of line), and whether the pattern is exactly that. Case-insensitive literals are
/// classes, not literals, so they get no prefix.
fn anchored_prefix(source: &str, i: bool, m: bool, s: bool, x: bool) -> (Option<Vec<u8>>, bool) {
    use regex_syntax::hir::{HirKind, Look};
    let Ok(hir) = regex_syntax::ParserBuilder::new()
        .case_insensitive(i)
        .multi_line(m)
        .dot_matches_new_line(s)
        .ignore_whitespace(x)
        .build()
        .parse(source)
    else {
        return (None, false);
    };
    let HirKind::Concat(parts) = hir.kind() else {
        return (None, false);
    };
    match parts.as_slice() {
        [start, lit, rest @ ..] if matches!(start.kind(), HirKind::Look(Look::Start)) => {
            match lit.kind() {
                HirKind::Literal(l) => (Some(l.0.to_vec()), rest.is_empty()),
                _ => (None, false),
            }
        }
        _ => (None, false),
    }
}

/// True when the pattern has a `$` and no `\z` (which must keep meaning the very end).
fn uses_end_line(ast: &regex_syntax::ast::Ast) -> bool {
    use regex_syntax::ast::{visit, AssertionKind, Ast, Visitor};
    #[derive(Default)]
    struct Finder {
        dollar: bool,
        end_text: bool,
    }
    impl Visitor for Finder {
        type Output = bool;
        type Err = ();
        fn finish(self) -> Result<bool, ()> {
            Ok(self.dollar && !self.end_text)
        }
        fn visit_pre(&mut self, ast: &Ast) -> Result<(), ()> {
            if let Ast::Assertion(a) = ast {
                match a.kind {
                    AssertionKind::EndLine => self.dollar = true,
                    AssertionKind::EndText => self.end_text = true,
                    _ => {}
                }
            }
            Ok(())
        }
    }
    visit(ast, Finder::default()).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        assert!(Pattern::compile("p", "^ab", "i").unwrap().is_match("ABc"));
        assert!(Pattern::compile("p", "^b", "m").unwrap().is_match("a\nb"));
        assert!(!Pattern::compile("p", "^b", "").unwrap().is_match("a\nb"));
        assert!(Pattern::compile("p", "a.b", "s").unwrap().is_match("a\nb"));
        assert!(Pattern::compile("p", "a b # comment", "x")
            .unwrap()
            .is_match("ab"));
        // PCRE's `$` matches before a final newline unless `\z` is used.
        assert!(Pattern::compile("p", "end$", "").unwrap().is_match("end\n"));
        assert!(!Pattern::compile("p", "end$", "")
            .unwrap()
            .is_match("end\nmore"));
        assert!(!Pattern::compile("p", "end\\z", "")
            .unwrap()
            .is_match("end\n"));
        assert_eq!(
            Pattern::compile("p", "a", "g").unwrap_err().code(),
            "bad_regex"
        );
    }

    #[test]
    fn the_prefix_shortcut_agrees_with_the_regex() {
        let subjects = [
            "",
            "k",
            "k0000042x",
            "k0000042xyz",
            "k0000042",
            "K0000042X",
            "xk0000042x",
            "k0000042x\n",
            "ab\nk0000042x",
            "abc",
            "abcd\n",
            "é€",
            "k0000042x€",
        ];
        for (pattern, options, has_prefix) in [
            ("^k0000042x", "", true),
            ("^k0000042x$", "", true),
            ("^k0000042x.*z", "", true),
            ("^k0000042x", "i", false),
            ("^k0000042x", "m", false),
            ("^(k0000042x|abc)", "", false),
            ("^abc$", "", true),
            ("^é€", "", true),
            ("k0000042x", "", false),
            ("^a b c", "x", true),
        ] {
            let p = Pattern::compile("p", pattern, options).unwrap();
            assert_eq!(p.prefix.is_some(), has_prefix, "{pattern} /{options}");
            let plain = regex::RegexBuilder::new(pattern)
                .case_insensitive(options.contains('i'))
                .multi_line(options.contains('m'))
                .ignore_whitespace(options.contains('x'))
                .build()
                .unwrap();
            for subject in subjects {
                let expected = plain.is_match(subject)
                    || (p.dollar_before_final_newline
                        && subject.ends_with('\n')
                        && plain.is_match(&subject[..subject.len() - 1]));
                assert_eq!(
                    p.is_match(subject),
                    expected,
                    "{pattern} /{options} on {subject:?}"
                );
            }
        }
    }

    #[test]
    fn refuses_backtracking() {
        for p in ["a(?=b)", "(?!x)y", "(?<=a)b", "(a)\\1"] {
            assert_eq!(
                Pattern::compile("p", p, "").unwrap_err().code(),
                "unsupported_regex",
                "{p}"
            );
        }
        assert_eq!(
            Pattern::compile("p", "(ab", "").unwrap_err().code(),
            "bad_regex"
        );
        assert_eq!(
            Pattern::compile("p", &"a".repeat(REGEX_BYTES_MAX + 1), "")
                .unwrap_err()
                .code(),
            "limit_exceeded"
        );
        assert_eq!(
            Pattern::compile("p", "(\\w{100}){100}", "")
                .unwrap_err()
                .code(),
            "limit_exceeded"
        );
    }
}
