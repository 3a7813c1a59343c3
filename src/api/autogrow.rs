//! `spec.storage.autoGrow` resolved: the threshold, the step (a quantity or a
//! percent of the volume) and the limit in bytes. One parser for the webhook,
//! the reconciler's validation and the growth planner, so they cannot differ
//! on what a step means.

use super::field::FieldError;
use super::quantity;
use super::v1::StorageSpec;

/// The smallest step a percent resolves to: growing a tiny volume by 20 %
/// must still move it.
pub const MIN_PERCENT_STEP_BYTES: u64 = 1 << 20;

/// How much one auto-grow adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A fixed number of bytes.
    Bytes(u64),
    /// A percent of the volume's current (requested) size.
    Percent(u32),
}

impl Step {
    /// Parses `512Mi` or `20%`; refuses zero.
    pub fn parse(text: &str) -> Result<Self, String> {
        let step = match text.strip_suffix('%') {
            Some(percent) => Step::Percent(
                percent
                    .parse()
                    .map_err(|_| format!("{text:?} is not a percent such as \"20%\""))?,
            ),
            None => Step::Bytes(to_u64(quantity::parse_bytes(text)?)),
        };
        match step {
            Step::Bytes(0) | Step::Percent(0) => Err(format!("{text:?} must not be zero")),
            _ => Ok(step),
        }
    }

    /// The bytes one grow adds to a volume of `size` bytes (never zero).
    pub fn bytes(self, size: u64) -> u64 {
        match self {
            Step::Bytes(bytes) => bytes,
            Step::Percent(percent) => {
                let bytes = u128::from(size) * u128::from(percent) / 100;
                to_u64(bytes).max(MIN_PERCENT_STEP_BYTES)
            }
        }
    }
}

/// `spec.storage.autoGrow`, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoGrow {
    /// Percent used at which a volume grows (1 to 99).
    pub threshold: u8,
    pub step: Step,
    /// Bytes no volume grows past.
    pub limit: u64,
}

/// `storage.autoGrow` resolved, or every rule it breaks: a threshold outside
/// 1..=99, an unparsable or zero step, an unparsable limit or one below
/// `storage.size`.
pub fn resolve(storage: &StorageSpec) -> Result<Option<AutoGrow>, Vec<FieldError>> {
    let Some(spec) = &storage.auto_grow else {
        return Ok(None);
    };
    let mut refusals = Vec::new();
    let threshold = u8::try_from(spec.threshold)
        .ok()
        .filter(|t| (1..=99).contains(t));
    if threshold.is_none() {
        refusals.push(FieldError::new(
            "spec.storage.autoGrow.threshold",
            format!("is {} but must be a percent from 1 to 99", spec.threshold),
        ));
    }
    let step = Step::parse(&spec.step)
        .map_err(|e| refusals.push(FieldError::new("spec.storage.autoGrow.step", e)))
        .ok();
    let limit = quantity::parse_bytes(&spec.limit)
        .map(to_u64)
        .map_err(|e| refusals.push(FieldError::new("spec.storage.autoGrow.limit", e)))
        .ok();
    if let (Some(limit), Ok(size)) = (limit, quantity::parse_bytes(&storage.size))
        && u128::from(limit) < size
    {
        refusals.push(FieldError::new(
            "spec.storage.autoGrow.limit",
            format!(
                "{} is below spec.storage.size {}: the limit must be at least the size",
                spec.limit, storage.size
            ),
        ));
    }
    match (threshold, step, limit) {
        (Some(threshold), Some(step), Some(limit)) if refusals.is_empty() => Ok(Some(AutoGrow {
            threshold,
            step,
            limit,
        })),
        _ => Err(refusals),
    }
}

fn to_u64(bytes: u128) -> u64 {
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1::AutoGrowSpec;

    fn storage(size: &str, threshold: i32, step: &str, limit: &str) -> StorageSpec {
        StorageSpec {
            size: size.into(),
            auto_grow: Some(AutoGrowSpec {
                threshold,
                step: step.into(),
                limit: limit.into(),
            }),
            ..StorageSpec::default()
        }
    }

    #[test]
    fn steps_are_quantities_or_percents() {
        assert_eq!(Step::parse("512Mi"), Ok(Step::Bytes(512 << 20)));
        assert_eq!(Step::parse("20%"), Ok(Step::Percent(20)));
        assert_eq!(Step::Percent(50).bytes(1 << 30), 512 << 20);
        assert_eq!(
            Step::Percent(1).bytes(1 << 10),
            MIN_PERCENT_STEP_BYTES,
            "a percent of a tiny volume still moves it"
        );
        assert_eq!(Step::Bytes(7).bytes(1 << 30), 7);
    }

    #[test]
    fn zero_and_garbage_steps_are_refused() {
        for bad in ["0", "0%", "0Gi", "x%", "ten"] {
            assert!(Step::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_valid_auto_grow_resolves() {
        assert_eq!(
            resolve(&storage("1Gi", 80, "256Mi", "2Gi")),
            Ok(Some(AutoGrow {
                threshold: 80,
                step: Step::Bytes(256 << 20),
                limit: 2 << 30,
            }))
        );
        assert_eq!(resolve(&StorageSpec::default()), Ok(None));
    }

    #[test]
    fn each_broken_rule_names_its_field() {
        let paths = |s: StorageSpec| -> Vec<String> {
            resolve(&s)
                .unwrap_err()
                .into_iter()
                .map(|r| r.path)
                .collect()
        };
        assert_eq!(
            paths(storage("2Gi", 80, "1Gi", "1Gi")),
            ["spec.storage.autoGrow.limit"]
        );
        assert_eq!(
            paths(storage("1Gi", 80, "0", "2Gi")),
            ["spec.storage.autoGrow.step"]
        );
        assert_eq!(
            paths(storage("1Gi", 100, "10%", "2Gi")),
            ["spec.storage.autoGrow.threshold"]
        );
        let below = resolve(&storage("2Gi", 80, "1Gi", "1Gi")).unwrap_err();
        assert!(
            below[0].message.contains("below spec.storage.size 2Gi"),
            "{below:?}"
        );
    }
}
