//! Whether an object as observed still is what a builder makes: every field
//! the builder sets has the same value in the observed object. Fields the
//! builder leaves out (those the API server or other controllers fill in:
//! a Service's `clusterIP`, defaults, status) are not compared, so a match
//! means "as built", not "byte for byte". The API server leaves out empty
//! values of `omitempty` fields (`false`, `0`, `""`), so a built empty value
//! matches an absent one.

use serde::Serialize;
use serde_json::Value;

/// `built` is contained in `observed`: objects key by key, arrays element by
/// element (same length), everything else equal. A `null` in `built` (an unset
/// optional) asks for nothing, and an empty scalar is met by its absence.
pub fn covers(built: &Value, observed: &Value) -> bool {
    match (built, observed) {
        (Value::Null, _) => true,
        (want, Value::Null) => is_empty_scalar(want),
        (Value::Object(want), Value::Object(have)) => want
            .iter()
            .all(|(key, value)| covers(value, have.get(key).unwrap_or(&Value::Null))),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| covers(w, h))
        }
        (want, have) => want == have,
    }
}

/// What Go's `omitempty` leaves out of a scalar field.
fn is_empty_scalar(value: &Value) -> bool {
    match value {
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// [`covers`] for two typed objects; an object that does not serialise never
/// matches (it is then re-applied, which is always safe for what is compared).
pub fn as_built<K: Serialize>(built: &K, observed: &K) -> bool {
    match (serde_json::to_value(built), serde_json::to_value(observed)) {
        (Ok(built), Ok(observed)) => covers(&built, &observed),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_the_server_adds_is_ignored_and_what_was_built_is_compared() {
        let built = json!({"spec": {"selector": {"role": "primary"}, "ports": [{"port": 5432}], "type": null}});
        let served = json!({"spec": {"selector": {"role": "primary"}, "ports": [{"port": 5432, "protocol": "TCP"}], "clusterIP": "198.19.0.7"}});
        assert!(covers(&built, &served));
        let edited = json!({"spec": {"selector": {"role": "replica"}, "ports": [{"port": 5432}]}});
        assert!(!covers(&built, &edited));
        let more_ports = json!({"spec": {"selector": {"role": "primary"}, "ports": [{"port": 5432}, {"port": 1}]}});
        assert!(!covers(&built, &more_ports));
        assert!(!covers(&json!({"a": 1}), &json!({})));
    }

    #[test]
    fn an_empty_value_the_server_leaves_out_is_as_built() {
        let built = json!({"spec": {"publishNotReadyAddresses": false, "port": 0, "name": ""}});
        assert!(covers(&built, &json!({"spec": {}})));
        assert!(!covers(
            &built,
            &json!({"spec": {"publishNotReadyAddresses": true}})
        ));
        assert!(!covers(&json!({"a": true}), &json!({})));
        assert!(!covers(&json!({"a": []}), &json!({})));
    }
}
