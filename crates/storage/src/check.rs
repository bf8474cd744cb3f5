//! `herald check`'s storage half: offline verification of a store's files.

/// One thing found damaged.
#[derive(Debug, Clone)]
pub struct Finding(pub String);

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    pub findings: Vec<Finding>,
}

pub fn check() {}
