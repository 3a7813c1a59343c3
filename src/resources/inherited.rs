//! `spec.inheritedMetadata` on the objects Tusk creates: the user's labels
//! and annotations under Tusk's own, which win on a shared key (admission
//! already refuses keys under `tusk.dev/`, but `app.kubernetes.io/*` may
//! collide), and whether an object as observed still carries them.

use std::collections::BTreeMap;

use crate::api::v1::InheritedMetadata;

/// `own` over `inherited`: every inherited entry whose key Tusk does not set
/// itself, and all of Tusk's.
pub fn merged(
    inherited: &BTreeMap<String, String>,
    own: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut all = inherited.clone();
    all.extend(own);
    all
}

/// The inherited annotations, or `None` when there are none (as built
/// before inherited metadata existed, so an unchanged object compares equal).
pub fn annotations(inherited: &InheritedMetadata) -> Option<BTreeMap<String, String>> {
    (!inherited.annotations.is_empty()).then(|| inherited.annotations.clone())
}

/// Adds Tusk's own `annotations` over the inherited ones already in `into`.
pub fn annotate(
    into: &mut Option<BTreeMap<String, String>>,
    annotations: impl IntoIterator<Item = (String, String)>,
) {
    into.get_or_insert_with(BTreeMap::new).extend(annotations);
}

/// The inherited labels and annotations an object with Tusk's `own` labels
/// must carry that `labels` and `annotations` (as observed) lack or have
/// with another value: what to patch back, empty when nothing drifted.
pub fn drift(
    inherited: &InheritedMetadata,
    own: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Drift {
    let missing = |wanted: &BTreeMap<String, String>, have: &BTreeMap<String, String>| {
        wanted
            .iter()
            .filter(|(k, v)| !own.contains_key(*k) && have.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    Drift {
        labels: missing(&inherited.labels, labels),
        annotations: missing(&inherited.annotations, annotations),
    }
}

/// Inherited entries an object lacks (see [`drift`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drift {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl Drift {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn tusk_s_own_labels_win() {
        let inherited = map(&[("team", "payments"), ("app.kubernetes.io/name", "evil")]);
        let own = map(&[("app.kubernetes.io/name", "postgresql")]);
        assert_eq!(
            merged(&inherited, own),
            map(&[
                ("app.kubernetes.io/name", "postgresql"),
                ("team", "payments")
            ])
        );
    }

    #[test]
    fn drift_is_what_is_missing_or_changed_and_not_tusk_s() {
        let inherited = InheritedMetadata {
            labels: map(&[("team", "payments"), ("app.kubernetes.io/name", "evil")]),
            annotations: map(&[("cost", "42")]),
        };
        let own = map(&[("app.kubernetes.io/name", "postgresql")]);
        let as_built = drift(
            &inherited,
            &own,
            &map(&[
                ("team", "payments"),
                ("app.kubernetes.io/name", "postgresql"),
            ]),
            &map(&[("cost", "42"), ("other", "x")]),
        );
        assert!(as_built.is_empty(), "{as_built:?}");
        let edited = drift(
            &inherited,
            &own,
            &map(&[("team", "other")]),
            &BTreeMap::new(),
        );
        assert_eq!(edited.labels, map(&[("team", "payments")]));
        assert_eq!(edited.annotations, map(&[("cost", "42")]));
    }

    #[test]
    fn no_inherited_annotations_builds_none() {
        assert_eq!(annotations(&InheritedMetadata::default()), None);
        let mut into = None;
        annotate(&mut into, [("a".to_owned(), "b".to_owned())]);
        assert_eq!(into, Some(map(&[("a", "b")])));
    }
}
