//! Shared by the unit tests' property modules.

use proptest::test_runner::Config as ProptestConfig;

/// `cases` cases, or `PROPTEST_CASES` of them when set (for a longer hunt); no
/// regression files in the source tree (a failure prints its case).
pub(crate) fn config(cases: u32) -> ProptestConfig {
    let base = ProptestConfig::default();
    ProptestConfig {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            base.cases
        } else {
            cases
        },
        failure_persistence: None,
        ..base
    }
}
