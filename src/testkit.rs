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

/// Any JSON scalar: null, booleans, integers of either sign and any size, finite
/// floats, any text.
pub(crate) fn json_scalar() -> proptest::strategy::BoxedStrategy<serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::Value;
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        any::<String>().prop_map(Value::String),
    ]
    .boxed()
}

/// JSON values built from `leaf`, nested up to `depth` levels in arrays and objects
/// (keys from `key`) of up to `width` items, about `size` nodes in all.
pub(crate) fn json_tree(
    leaf: proptest::strategy::BoxedStrategy<serde_json::Value>,
    key: proptest::strategy::BoxedStrategy<String>,
    (depth, size, width): (u32, u32, usize),
) -> proptest::strategy::BoxedStrategy<serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::Value;
    leaf.prop_recursive(depth, size, width as u32, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..width).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..width)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
    .boxed()
}

/// A waker that counts its wake-ups.
pub(crate) struct CountedWaker(std::sync::atomic::AtomicUsize);

impl CountedWaker {
    /// The counter and a waker of it.
    pub(crate) fn new() -> (std::sync::Arc<Self>, std::task::Waker) {
        let counted = std::sync::Arc::new(Self(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(counted.clone());
        (counted, waker)
    }

    /// Wake-ups so far.
    pub(crate) fn count(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl std::task::Wake for CountedWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
