//! Just enough of a Rust lexer for the tidy checks: identifiers, `::` and punctuation with their
//! line numbers. Comments are dropped and literals (strings of every kind, chars, numbers)
//! become one opaque token, so a path written in a comment or a string is never read as code.
//! Also removes the items under `#[cfg(test)]`, which may reach anywhere in their crate.
//!
//! It does not parse Rust: every rule here errs towards seeing less code (a missed reference),
//! never towards inventing code that is not there.

/// One token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    /// A string, byte string, raw string, char or number literal.
    Literal,
    Punct(char),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    /// 1-based.
    pub line: usize,
}

impl Token {
    pub fn is_ident(&self, name: &str) -> bool {
        matches!(&self.tok, Tok::Ident(i) if i == name)
    }

    pub fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }
}

fn ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn ident_continue(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    line: usize,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    /// Moves past one char, counting lines.
    fn bump(&mut self) {
        if self.peek(0) == Some('\n') {
            self.line += 1;
        }
        self.pos += 1;
    }

    fn skip_line_comment(&mut self) {
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.pos += 1;
        }
    }

    /// Block comments nest in Rust.
    fn skip_block_comment(&mut self) {
        self.pos += 2;
        let mut depth = 1;
        while depth > 0 && self.peek(0).is_some() {
            match (self.peek(0), self.peek(1)) {
                (Some('/'), Some('*')) => {
                    depth += 1;
                    self.pos += 2;
                }
                (Some('*'), Some('/')) => {
                    depth -= 1;
                    self.pos += 2;
                }
                _ => self.bump(),
            }
        }
    }

    /// From the opening `"`: a string with backslash escapes.
    fn skip_string(&mut self) {
        self.pos += 1;
        while let Some(c) = self.peek(0) {
            match c {
                '\\' => {
                    self.pos += 1;
                    self.bump();
                }
                '"' => {
                    self.pos += 1;
                    return;
                }
                _ => self.bump(),
            }
        }
    }

    /// From the `r`: `r"..."`, `r#"..."#` and so on; no escapes, ends at `"` and as many `#`.
    fn skip_raw_string(&mut self) {
        self.pos += 1;
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            hashes += 1;
            self.pos += 1;
        }
        self.pos += 1; // the opening quote
        while self.peek(0).is_some() {
            if self.peek(0) == Some('"') && (1..=hashes).all(|i| self.peek(i) == Some('#')) {
                self.pos += 1 + hashes;
                return;
            }
            self.bump();
        }
    }

    /// Whether a raw string starts `ahead` chars from here (at its `r`, after any `b` or `c`
    /// prefix), not a raw identifier (`r#match`).
    fn raw_string_at(&self, ahead: usize) -> bool {
        if self.peek(ahead) != Some('r') {
            return false;
        }
        let mut i = ahead + 1;
        while self.peek(i) == Some('#') {
            i += 1;
        }
        self.peek(i) == Some('"')
    }

    /// At `'`: a char literal is skipped and reported, a lifetime or label is left to be lexed
    /// as an identifier (its quote dropped).
    fn skip_char_or_quote(&mut self) -> bool {
        // `'\n'`, `'x'`; a lifetime `'a` has no closing quote after one char.
        let literal = matches!(
            (self.peek(1), self.peek(2)),
            (Some('\\'), _) | (Some(_), Some('\''))
        );
        self.pos += 1;
        if literal {
            if self.peek(0) == Some('\\') {
                self.pos += 2;
            }
            while self.peek(0).is_some_and(|c| c != '\'') {
                self.bump();
            }
            self.pos += 1;
        }
        literal
    }
}

/// The tokens of `text`.
pub fn lex(text: &str) -> Vec<Token> {
    let mut lx = Lexer {
        chars: text.chars().collect(),
        pos: 0,
        line: 1,
    };
    let mut out = Vec::new();
    while let Some(c) = lx.peek(0) {
        let line = lx.line;
        let mut push = |tok| out.push(Token { tok, line });
        match c {
            _ if c.is_whitespace() => lx.bump(),
            '/' if lx.peek(1) == Some('/') => lx.skip_line_comment(),
            '/' if lx.peek(1) == Some('*') => lx.skip_block_comment(),
            '"' => {
                lx.skip_string();
                push(Tok::Literal);
            }
            '\'' => {
                if lx.skip_char_or_quote() {
                    push(Tok::Literal);
                }
            }
            'b' | 'c' if lx.peek(1) == Some('"') => {
                lx.pos += 1;
                lx.skip_string();
                push(Tok::Literal);
            }
            'b' if lx.peek(1) == Some('\'') => {
                lx.pos += 1;
                lx.skip_char_or_quote();
                push(Tok::Literal);
            }
            'r' if lx.raw_string_at(0) => {
                lx.skip_raw_string();
                push(Tok::Literal);
            }
            'b' | 'c' if lx.raw_string_at(1) => {
                lx.pos += 1;
                lx.skip_raw_string();
                push(Tok::Literal);
            }
            _ if c.is_ascii_digit() => {
                while lx.peek(0).is_some_and(ident_continue) {
                    lx.pos += 1;
                }
                push(Tok::Literal);
            }
            'r' if lx.peek(1) == Some('#') && lx.peek(2).is_some_and(ident_start) => {
                // A raw identifier: `r#match` is the name `match`.
                lx.pos += 2;
                let start = lx.pos;
                while lx.peek(0).is_some_and(ident_continue) {
                    lx.pos += 1;
                }
                push(Tok::Ident(lx.chars[start..lx.pos].iter().collect()));
            }
            _ if ident_start(c) => {
                let start = lx.pos;
                while lx.peek(0).is_some_and(ident_continue) {
                    lx.pos += 1;
                }
                push(Tok::Ident(lx.chars[start..lx.pos].iter().collect()));
            }
            ':' if lx.peek(1) == Some(':') => {
                lx.pos += 2;
                push(Tok::PathSep);
            }
            _ => {
                lx.pos += 1;
                push(Tok::Punct(c));
            }
        }
    }
    out
}

/// Code with its test-only items taken out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NonTest {
    pub tokens: Vec<Token>,
    /// Modules declared `#[cfg(test)] mod name;`: their files are test code.
    pub test_modules: Vec<String>,
    /// The file says `#![cfg(test)]`: all of it is test code.
    pub all_test: bool,
}

/// Whether `t[i..]` starts with `#[cfg(test)]` (or `#![cfg(test)]` when `inner`).
fn cfg_test_at(t: &[Token], i: usize, inner: bool) -> bool {
    let bang = usize::from(inner);
    let want = |k: usize, ok: &dyn Fn(&Token) -> bool| t.get(i + k).is_some_and(ok);
    want(0, &|x| x.is_punct('#'))
        && (!inner || want(1, &|x| x.is_punct('!')))
        && want(1 + bang, &|x| x.is_punct('['))
        && want(2 + bang, &|x| x.is_ident("cfg"))
        && want(3 + bang, &|x| x.is_punct('('))
        && want(4 + bang, &|x| x.is_ident("test"))
        && want(5 + bang, &|x| x.is_punct(')'))
        && want(6 + bang, &|x| x.is_punct(']'))
}

fn opens(t: &Token) -> bool {
    t.is_punct('(') || t.is_punct('[') || t.is_punct('{')
}

fn closes(t: &Token) -> bool {
    t.is_punct(')') || t.is_punct(']') || t.is_punct('}')
}

/// From an opening bracket: the index just past its matching close.
fn past_group(t: &[Token], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < t.len() {
        if opens(&t[i]) {
            depth += 1;
        } else if closes(&t[i]) {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    i
}

/// Keywords that start an item ending at `;` or at its `{ ... }` body. Anything else under an
/// attribute (a field, an enum variant, a match arm) ends at a `,` too.
const ITEM_KEYWORDS: &[&str] = &[
    "pub",
    "fn",
    "mod",
    "use",
    "impl",
    "struct",
    "enum",
    "union",
    "trait",
    "type",
    "const",
    "static",
    "unsafe",
    "async",
    "extern",
    "macro_rules",
    "let",
];

/// From the first token of an item (after its attributes): the index just past it. Never goes
/// past a bracket that closes something the item is inside.
fn past_item(t: &[Token], start: usize) -> usize {
    let item = t
        .get(start)
        .is_some_and(|x| ITEM_KEYWORDS.iter().any(|k| x.is_ident(k)));
    let mut i = start;
    while i < t.len() {
        let x = &t[i];
        if x.is_punct(';') || (!item && x.is_punct(',')) {
            return i + 1;
        }
        if closes(x) {
            return i;
        }
        if opens(x) {
            let end = past_group(t, i);
            if x.is_punct('{') && item {
                return end;
            }
            i = end;
        } else {
            i += 1;
        }
    }
    i
}

/// `mod name;` (after any visibility) at `t[i..end]`: the name.
fn declared_module(t: &[Token], mut i: usize, end: usize) -> Option<String> {
    if t.get(i).is_some_and(|x| x.is_ident("pub")) {
        i += 1;
        if t.get(i).is_some_and(|x| x.is_punct('(')) {
            i = past_group(t, i);
        }
    }
    match (t.get(i), t.get(i + 1), t.get(i + 2)) {
        (
            Some(m),
            Some(Token {
                tok: Tok::Ident(name),
                ..
            }),
            Some(semi),
        ) if m.is_ident("mod") && semi.is_punct(';') && i + 3 == end => Some(name.clone()),
        _ => None,
    }
}

/// `tokens` without the items under `#[cfg(test)]`.
pub fn without_test_code(tokens: Vec<Token>) -> NonTest {
    let t = &tokens;
    let mut out = NonTest::default();
    let mut i = 0;
    while i < t.len() {
        if cfg_test_at(t, i, true) {
            out.all_test = true;
            return out;
        }
        if !cfg_test_at(t, i, false) {
            out.tokens.push(t[i].clone());
            i += 1;
            continue;
        }
        // Past this attribute and any others on the same item.
        i += 7;
        while t.get(i).is_some_and(|x| x.is_punct('#')) && t.get(i + 1).is_some_and(opens) {
            i = past_group(t, i + 1);
        }
        let end = past_item(t, i);
        if let Some(name) = declared_module(t, i, end) {
            out.test_modules.push(name);
        }
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    // An integration test is always compiled with `cfg(test)`; the module only groups these.
    use super::*;

    fn idents(text: &str) -> Vec<String> {
        lex(text)
            .into_iter()
            .filter_map(|t| match t.tok {
                Tok::Ident(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_and_literals_hide_their_contents() {
        let text = r###"a // b crate::x
/* c /* nested d */ e */ f "g \" h" r#"i " j"# br"k" b'"' '"' 'l' 'm
m: &'static str; c"n" r#raw"###;
        assert_eq!(
            idents(text),
            ["a", "f", "m", "m", "static", "str", "raw"],
            "{:?}",
            lex(text)
        );
    }

    #[test]
    fn lines_are_counted_through_comments_and_strings() {
        let t = lex("a\n/* \n */ \"\n\" b\n// c\nd");
        let lines: Vec<_> = t.iter().map(|t| t.line).collect();
        assert_eq!(lines, [1, 3, 4, 6]);
    }

    #[test]
    fn test_items_are_removed() {
        let text = "use a;
#[cfg(test)]
mod tests { use crate::x; fn f() { g(); } }
#[cfg(test)]
#[allow(dead_code)]
pub(crate) fn helper() -> u8 { 1 }
#[cfg(test)]
mod more;
enum E { A, #[cfg(test)] B(Vec<u8>), C }
fn k() { match e { #[cfg(test)] E::B(_) => crate::y(), E::C => z() } }
use b;";
        let got = without_test_code(lex(text));
        assert_eq!(
            got.tokens
                .iter()
                .filter_map(|t| match &t.tok {
                    Tok::Ident(s) => Some(s.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>(),
            [
                "use", "a", "enum", "E", "A", "C", "fn", "k", "match", "e", "E", "C", "z", "use",
                "b"
            ]
        );
        assert_eq!(got.test_modules, ["more"]);
        assert!(!got.all_test);
        assert!(without_test_code(lex("//! Doc.\n#![cfg(test)]\nuse a;")).all_test);
    }

    /// A literal or comment misread would swallow or expose brackets: every Rust file of the
    /// tree must lex to balanced ones.
    #[test]
    fn every_rust_file_of_the_tree_lexes_to_balanced_brackets() {
        let root = crate::repo_root();
        let mut unbalanced = Vec::new();
        for file in crate::files(&root, "crates", "rs") {
            let mut stack = Vec::new();
            for t in lex(&crate::read(&root, &file)) {
                match t.tok {
                    Tok::Punct(c @ ('(' | '[' | '{')) => stack.push(c),
                    Tok::Punct(c @ (')' | ']' | '}')) => {
                        let want = match c {
                            ')' => '(',
                            ']' => '[',
                            _ => '{',
                        };
                        if stack.pop() != Some(want) {
                            unbalanced.push(format!("{file}:{}: unexpected '{c}'", t.line));
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if !stack.is_empty() {
                unbalanced.push(format!("{file}: {stack:?} left open"));
            }
        }
        assert!(unbalanced.is_empty(), "{unbalanced:#?}");
    }
}
