//! The comparison with the baselines: the published baselines (the vendor's aside) run
//! on the search and held-out seeds, each told to the TPE models as a first observation
//! and reported by its search objective, and at the end the tested recommendation's
//! advantage over each on the held-out seeds, paired by seed (`versus`). The baselines
//! are references: none is ever a candidate or the recommendation.

use serde::Serialize;
use xirang_fabric::tune::value_of;

use super::held_out::HeldOut;
use super::propose::Model;
use super::result::TuneError;
use super::runs::FULL;
use super::tuning::Search;
use super::{mean, mix};
use crate::space::{Baseline, Param};
use crate::stats::{Interval, mean_interval};

/// A baseline's figures during the search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineResult {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Mean objective over the search seeds (the vendor's is 1 by construction).
    pub objective: f64,
}

impl Search<'_> {
    /// The baselines other than the vendor on the search and held-out seeds; each
    /// baseline's search objective, and each told to the models as a first observation.
    pub(super) fn baselines(
        &self,
        baselines: &[Baseline],
        models: &mut [Model],
        space: &[Param],
    ) -> Result<Vec<BaselineResult>, TuneError> {
        let mut jobs = Vec::new();
        for (i, b) in baselines.iter().enumerate().skip(1) {
            let id = -(i as i64) - 1;
            let both: Vec<u64> = self
                .seeds
                .search
                .iter()
                .chain(&self.seeds.held)
                .copied()
                .collect();
            jobs.extend(self.jobs(id, &format!("\"{}\"", b.name), &b.config, &both));
        }
        let mut got = self.runs.run(jobs)?;
        for s in self
            .seeds
            .search
            .iter()
            .chain(&self.seeds.held)
            .chain(&self.seeds.validation)
        {
            got.insert((-1, FULL, *s), self.reference[s].clone());
        }
        let mut out = Vec::new();
        for (i, b) in baselines.iter().enumerate() {
            let id = -(i as i64) - 1;
            let (first, _) = self.mean_score(id, &self.seeds.early, &got);
            let full = mean(
                &self
                    .seed_scores(id, &self.seeds.search, &got)
                    .iter()
                    .map(|s| s.relative)
                    .collect::<Vec<_>>(),
            );
            for (p, m) in space.iter().zip(models.iter_mut()) {
                if let Some(v) = value_of(&b.config, &self.tiers, &p.name) {
                    m.tell(p, &v, first);
                }
            }
            out.push(BaselineResult {
                name: b.name.to_string(),
                description: b.description.to_string(),
                objective: full,
            });
        }
        Ok(out)
    }
}

/// A baseline's name and the tuned configuration's advantage over it per seed.
type Versus = (String, Interval);

/// The tuned configuration against the baselines on the held-out seeds: its advantage
/// over each, and the best baseline's entry of that list (see
/// [`TuneResult::versus_best_baseline`]).
pub(super) fn versus(held_out: &[HeldOut], seed: u64) -> (Vec<Versus>, Option<Versus>) {
    // Against the best baseline other than the vendor (lowest held-out mean): the tuned
    // configuration's advantage per seed, paired on the seeds both ran; without one, the
    // baseline's own gain over the vendor.
    let best_baseline = held_out
        .iter()
        .filter(|h| h.name != "tuned" && h.name != "vendor")
        .min_by(|a, b| a.mean().total_cmp(&b.mean()).then(a.name.cmp(&b.name)));
    // Against every baseline: the tuned configuration's advantage per seed (its objective
    // subtracted from the baseline's; +0.05: 5 % of the vendor's better), paired on the
    // seeds both ran.
    let versus_baselines: Vec<(String, Interval)> = match held_out.iter().find(|h| h.name == "tuned") {
        Some(t) => held_out
            .iter()
            .filter(|h| h.name != "tuned")
            .map(|b| {
                let diffs: Vec<f64> = b
                    .objectives
                    .iter()
                    .zip(&t.objectives)
                    .map(|(x, y)| x - y)
                    .collect();
                (b.name.clone(), mean_interval(&diffs, mix(seed, 0xba5e)))
            })
            .collect(),
        None => Vec::new(),
    };
    // The best baseline's entry of that list (one interval per comparison, wherever it is
    // shown); with nothing tested, the baseline's own gain over the vendor.
    let versus_best_baseline =
        best_baseline.map(|b| match versus_baselines.iter().find(|(n, _)| *n == b.name) {
            Some(v) => v.clone(),
            None => {
                let gains: Vec<f64> = b.objectives.iter().map(|x| 1.0 - x).collect();
                (b.name.clone(), mean_interval(&gains, mix(seed, 0xba5e)))
            }
        });
    (versus_baselines, versus_best_baseline)
}
