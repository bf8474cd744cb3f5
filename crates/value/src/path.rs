//! Dotted field paths (`address.geo.lat`, `tags.0`), parsed and validated once.
//!
//! A segment made only of ASCII digits in canonical form (`0`, `17`, not `007`) may also address
//! an array position; whether it does depends on the value found at that point, which is the
//! evaluator's business, not the parser's.

use std::fmt;

/// Longest accepted dotted path, in bytes.
pub const PATH_BYTES_MAX: usize = 1024;
/// Most segments in one dotted path.
pub const PATH_SEGMENTS_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("field path is empty")]
    Empty,
    #[error("field path '{0}' has an empty segment")]
    EmptySegment(String),
    #[error("field path is longer than {PATH_BYTES_MAX} bytes")]
    TooLong,
    #[error("field path has more than {PATH_SEGMENTS_MAX} segments")]
    TooManySegments,
    #[error("field path '{0}' contains a NUL character")]
    Nul(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub name: Box<str>,
    /// `Some(i)` when the segment can address array position `i`.
    pub index: Option<usize>,
}

#[derive(Clone, PartialEq, Eq)]
pub struct FieldPath {
    dotted: Box<str>,
    segments: Box<[Segment]>,
}

impl FieldPath {
    pub fn parse(dotted: &str) -> Result<FieldPath, PathError> {
        if dotted.is_empty() {
            return Err(PathError::Empty);
        }
        if dotted.len() > PATH_BYTES_MAX {
            return Err(PathError::TooLong);
        }
        if dotted.contains('\0') {
            return Err(PathError::Nul(dotted.to_string()));
        }
        let mut segments = Vec::new();
        for name in dotted.split('.') {
            if name.is_empty() {
                return Err(PathError::EmptySegment(dotted.to_string()));
            }
            if segments.len() == PATH_SEGMENTS_MAX {
                return Err(PathError::TooManySegments);
            }
            segments.push(Segment {
                name: name.into(),
                index: array_index(name),
            });
        }
        Ok(FieldPath {
            dotted: dotted.into(),
            segments: segments.into(),
        })
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    pub fn as_str(&self) -> &str {
        &self.dotted
    }

    pub fn len(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// True when `self` equals `other` or is a proper prefix of it, segment-wise.
    pub fn is_prefix_of(&self, other: &FieldPath) -> bool {
        self.segments.len() <= other.segments.len()
            && self
                .segments
                .iter()
                .zip(other.segments.iter())
                .all(|(a, b)| a.name == b.name)
    }
}

impl fmt::Debug for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FieldPath({})", self.dotted)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dotted)
    }
}

fn array_index(name: &str) -> Option<usize> {
    let canonical =
        name.bytes().all(|b| b.is_ascii_digit()) && (name == "0" || !name.starts_with('0'));
    if canonical && name.len() <= 9 {
        name.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_segments_and_indexes() {
        let p = FieldPath::parse("a.0.b.10.007").unwrap();
        let idx: Vec<_> = p.segments().iter().map(|s| s.index).collect();
        assert_eq!(idx, vec![None, Some(0), None, Some(10), None]);
    }

    #[test]
    fn rejects_bad_paths() {
        assert_eq!(FieldPath::parse(""), Err(PathError::Empty));
        assert!(matches!(
            FieldPath::parse("a..b"),
            Err(PathError::EmptySegment(_))
        ));
        assert!(matches!(
            FieldPath::parse("a."),
            Err(PathError::EmptySegment(_))
        ));
        assert!(matches!(
            FieldPath::parse(".a"),
            Err(PathError::EmptySegment(_))
        ));
        assert_eq!(
            FieldPath::parse(&"a".repeat(PATH_BYTES_MAX + 1)),
            Err(PathError::TooLong)
        );
        assert_eq!(
            FieldPath::parse(&vec!["a"; PATH_SEGMENTS_MAX + 1].join(".")),
            Err(PathError::TooManySegments)
        );
    }

    #[test]
    fn prefix() {
        let a = FieldPath::parse("a.b").unwrap();
        assert!(a.is_prefix_of(&FieldPath::parse("a.b.c").unwrap()));
        assert!(a.is_prefix_of(&a));
        assert!(!a.is_prefix_of(&FieldPath::parse("a.bc").unwrap()));
        assert!(!a.is_prefix_of(&FieldPath::parse("a").unwrap()));
    }
}
