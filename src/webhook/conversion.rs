//! The ConversionReview handler: all objects convert, or the review fails whole
//! with a message — never a partial list.

use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};

use crate::api::conversion::convert_object;

pub fn review(review: ConversionReview) -> ConversionReview {
    let request = match ConversionRequest::from_review(review) {
        Ok(request) => request,
        Err(_) => {
            return ConversionResponse::invalid(Status::failure(
                "the ConversionReview has no request",
                "BadRequest",
            ))
            .into_review();
        }
    };
    let desired = request.desired_api_version.clone();
    let objects = request.objects.clone();
    let response = ConversionResponse::for_request(request);
    let mut converted = Vec::with_capacity(objects.len());
    for (index, object) in objects.into_iter().enumerate() {
        match convert_object(object, &desired) {
            Ok(object) => converted.push(object),
            Err(e) => {
                let message = format!("cannot convert object {index} to {desired}: {e}");
                return response
                    .failure(Status::failure(&message, "ConversionFailed"))
                    .into_review();
            }
        }
    }
    response.success(converted).into_review()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::arbitrary;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn request(desired: &str, objects: Vec<Value>) -> ConversionReview {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "0000-1111", "desiredAPIVersion": desired, "objects": objects}
        }))
        .unwrap()
    }

    fn answer(review: ConversionReview) -> Value {
        serde_json::to_value(review).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Through the handler, v1 → v1alpha1 → v1 gives back the same objects.
        #[test]
        fn round_trip_through_the_handler(dbs in proptest::collection::vec(arbitrary::database_v1(), 1..4)) {
            let originals: Vec<Value> = dbs.iter().map(|d| serde_json::to_value(d).unwrap()).collect();
            let down = answer(review(request("tusk.dev/v1alpha1", originals.clone())));
            prop_assert_eq!(&down["response"]["result"]["status"], "Success");
            let alpha = down["response"]["convertedObjects"].as_array().unwrap().clone();
            let up = answer(review(request("tusk.dev/v1", alpha)));
            prop_assert_eq!(&up["response"]["convertedObjects"], &Value::Array(originals));
            prop_assert_eq!(&up["response"]["uid"], "0000-1111");
        }
    }

    #[test]
    fn one_bad_object_fails_the_whole_review() {
        let good = serde_json::to_value(arbitrary::sample_database()).unwrap();
        let bad = json!({"apiVersion": "tusk.dev/v1", "kind": "Database", "metadata": {"name": "x"}, "spec": {"version": 17}});
        let out = answer(review(request("tusk.dev/v1alpha1", vec![good, bad])));
        assert_eq!(out["response"]["result"]["status"], "Failure");
        assert!(
            out["response"]["result"]["message"]
                .as_str()
                .unwrap()
                .contains("cannot convert object 1")
        );
        assert!(
            out["response"]
                .get("convertedObjects")
                .is_none_or(|o| o.as_array().is_none_or(Vec::is_empty))
        );
    }

    #[test]
    fn a_review_without_request_is_answered() {
        let review: ConversionReview = serde_json::from_value(
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}),
        )
        .unwrap();
        let out = answer(super::review(review));
        assert_eq!(out["response"]["result"]["status"], "Failure");
    }
}
