//! Runs every conformance vector file and requires all cases to pass.

/// The floor for the size of the suite; the vectors are the SDK's contract too.
const CASES_MIN: usize = 400;

#[test]
fn every_conformance_case_passes() {
    let report = herald_conformance::check_dir(&herald_conformance::default_dir())
        .expect("vectors readable");
    for f in &report.failures {
        eprintln!("FAIL {f}");
    }
    assert!(
        report.failures.is_empty(),
        "{} of {} cases failed",
        report.failures.len(),
        report.cases
    );
    assert!(
        report.cases >= CASES_MIN,
        "only {} cases, want at least {CASES_MIN}",
        report.cases
    );
}
