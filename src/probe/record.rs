//! What the probe saw: pure bookkeeping of acknowledged and failed writes,
//! and the lost ones once the table is read back.

use std::collections::BTreeSet;

use crate::contract::drill::ProbeReport;

/// Every acknowledgement, in order, and the count of writes that failed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    acknowledged: Vec<(i64, f64)>,
    failed: i64,
}

impl Record {
    /// Write `id` was acknowledged at Unix time `at`.
    pub fn acknowledged(&mut self, id: i64, at: f64) {
        self.acknowledged.push((id, at));
    }

    /// A write failed or its outcome is unknown (it may have committed: only
    /// acknowledged writes must survive).
    pub fn failed(&mut self) {
        self.failed += 1;
    }

    /// The report while the probe is writing.
    pub fn report(&self) -> ProbeReport {
        ProbeReport {
            acknowledged: self.acknowledged.clone(),
            failed: self.failed,
            ..ProbeReport::default()
        }
    }

    /// The report once the table was read back: `present` holds the ids
    /// found.
    pub fn finished(&self, present: &BTreeSet<i64>) -> ProbeReport {
        ProbeReport {
            finished: true,
            lost: self
                .acknowledged
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| !present.contains(id))
                .collect(),
            ..self.report()
        }
    }

    /// The report when the table could not be read back: nothing can be
    /// said about lost writes, and it says why.
    pub fn unverified(&self, why: String) -> ProbeReport {
        ProbeReport {
            finished: true,
            error: Some(why),
            ..self.report()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acknowledged_id_missing_from_the_table_is_lost_and_a_failed_one_is_not() {
        let mut record = Record::default();
        record.acknowledged(1, 10.0);
        record.acknowledged(2, 10.1);
        record.failed();
        record.acknowledged(4, 12.0);
        let present: BTreeSet<i64> = [1, 3, 4].into();
        let report = record.finished(&present);
        assert!(report.finished);
        assert_eq!(report.lost, vec![2]);
        assert_eq!(report.failed, 1);
        assert_eq!(report.acknowledged.len(), 3);
    }

    #[test]
    fn an_unverified_report_claims_no_loss_and_says_why() {
        let mut record = Record::default();
        record.acknowledged(1, 1.0);
        let report = record.unverified("no connection".into());
        assert!(report.finished && report.lost.is_empty());
        assert_eq!(report.error.as_deref(), Some("no connection"));
    }
}
