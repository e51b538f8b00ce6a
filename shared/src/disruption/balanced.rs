//! `consolidationPolicy: Balanced`, as Karpenter scores a consolidation
//! move: pure arithmetic over prices and disruption costs, no I/O.
//!
//! For each Balanced NodePool a move touches, the share of the pool's cost
//! the move saves is divided by the share of the pool's disruption cost it
//! causes; the move passes when that score reaches 1/k (k = 2). A node's
//! disruption cost is 1 (draining the node itself) plus its reschedulable
//! pods' positive eviction costs; a pool's totals count every node of the
//! pool, candidates or not. Savings of a move spanning several pools are
//! split by the candidates' prices. Every Balanced pool of a move must
//! approve it; other pools are not scored.
//!
//! Candidates are also ordered by their savings ratio, price over
//! disruption cost, highest first (for every policy), so a budget-limited
//! pass takes the moves worth most per unit of disruption.

use std::collections::BTreeMap;

use crate::config::ConsolidationPolicy;

/// Karpenter's k: a move passes when its score is at least 1/k.
pub const K: u32 = 2;
/// What draining a node costs besides its pods' eviction costs.
pub const PER_NODE_DISRUPTION: f64 = 1.0;

/// A price the score can add up: a NaN, infinite or negative price (an
/// offering the catalog prices wrongly) counts as 0 rather than poisoning
/// the pool's totals.
pub fn sane_price(price: f64) -> f64 {
    if price.is_finite() && price > 0.0 {
        price
    } else {
        0.0
    }
}

/// A node's disruption cost: 1 plus its pods' eviction costs, negative
/// ones counting 0.
pub fn node_disruption(eviction_costs: impl IntoIterator<Item = f64>) -> f64 {
    PER_NODE_DISRUPTION
        + eviction_costs
            .into_iter()
            .map(|c| if c.is_nan() { 0.0 } else { c.max(0.0) })
            .sum::<f64>()
}

/// A node as the score sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored<'a> {
    pub name: &'a str,
    pub pool: &'a str,
    pub policy: ConsolidationPolicy,
    /// What the node costs now ($/h; 0 when unknown).
    pub price: f64,
    /// [`node_disruption`] of its reschedulable pods.
    pub disruption: f64,
}

impl Scored<'_> {
    /// Price per unit of disruption: the higher, the more a removal is worth.
    pub fn savings_ratio(&self) -> f64 {
        let d = self.disruption.max(PER_NODE_DISRUPTION);
        sane_price(self.price) / d
    }
}

/// A pool's cost and disruption cost, over all its nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolTotals {
    pub cost: f64,
    pub disruption: f64,
}

/// Each pool's totals, from every node of the cluster that belongs to one.
pub fn pool_totals(nodes: &[Scored<'_>]) -> BTreeMap<String, PoolTotals> {
    let mut out: BTreeMap<String, PoolTotals> = BTreeMap::new();
    for n in nodes {
        let t = out.entry(n.pool.to_owned()).or_default();
        t.cost += sane_price(n.price);
        t.disruption += n.disruption.max(0.0);
    }
    out
}

/// The sum of the nodes' prices (unknown prices count 0).
pub fn sum_prices(nodes: &[Scored<'_>]) -> f64 {
    nodes.iter().map(|n| sane_price(n.price)).sum()
}

/// One pool's score of a move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// The share of the pool's cost saved.
    pub savings_fraction: f64,
    /// The share of the pool's disruption cost caused.
    pub disruption_fraction: f64,
    pub k: u32,
}

impl Score {
    /// Savings share over disruption share: 0 when nothing is saved,
    /// infinite when something is saved for no disruption.
    pub fn value(&self) -> f64 {
        if self.savings_fraction.is_nan() || self.savings_fraction <= 0.0 {
            0.0
        } else if self.disruption_fraction == 0.0 {
            f64::INFINITY
        } else {
            self.savings_fraction / self.disruption_fraction
        }
    }

    pub fn threshold(&self) -> f64 {
        1.0 / f64::from(self.k.max(1))
    }

    pub fn approved(&self) -> bool {
        self.value() >= self.threshold()
    }

    /// The score in a user's words.
    pub fn describe(&self, pool: &str) -> String {
        let (saving, disruption) = (
            100.0 * self.savings_fraction,
            100.0 * self.disruption_fraction,
        );
        if self.approved() {
            format!(
                "NodePool {pool} is Balanced: saving {saving:.1} % of its cost for {disruption:.1} % of its disruption (score {:.2} >= threshold {:.2}, k: {})",
                self.value(),
                self.threshold(),
                self.k
            )
        } else {
            format!(
                "NodePool {pool} is Balanced: saving {saving:.1} % of its cost does not justify {disruption:.1} % of its disruption (score {:.2} below {:.2})",
                self.value(),
                self.threshold()
            )
        }
    }
}

/// Scores a move saving `savings` ($/h) for `disruption` in a pool of
/// `totals`. A pool with no cost or no disruption to compare with scores 0
/// (rejected): there is nothing to weigh the move against.
pub fn score_move(savings: f64, disruption: f64, totals: PoolTotals, k: u32) -> Score {
    // (NaN totals fail both tests too.)
    let positive = |x: f64| x > 0.0;
    if !positive(totals.cost) || !positive(totals.disruption) {
        return Score {
            savings_fraction: 0.0,
            disruption_fraction: 0.0,
            k,
        };
    }
    Score {
        savings_fraction: savings / totals.cost,
        disruption_fraction: disruption / totals.disruption,
        k,
    }
}

/// Scores a move removing `moved` and saving `savings` ($/h net of any
/// replacement): each Balanced pool of the move on its own, with the
/// savings split by the moved nodes' prices when the move spans pools. The
/// move is approved when every Balanced pool approves (a move with no node
/// is not); a pool missing from `totals` scores 0. The scores are by pool
/// name, Balanced pools only.
pub fn evaluate(
    moved: &[Scored<'_>],
    savings: f64,
    totals: &BTreeMap<String, PoolTotals>,
) -> (bool, BTreeMap<String, Score>) {
    let mut scores = BTreeMap::new();
    if moved.is_empty() {
        return (false, scores);
    }
    let mut by_pool: BTreeMap<&str, Vec<&Scored<'_>>> = BTreeMap::new();
    for n in moved {
        by_pool.entry(n.pool).or_default().push(n);
    }
    let source = sum_prices(moved);
    let spans = by_pool.len() > 1;
    let mut approved = true;
    for (pool, nodes) in &by_pool {
        if nodes[0].policy != ConsolidationPolicy::Balanced {
            continue;
        }
        let pool_source: f64 = nodes.iter().map(|n| sane_price(n.price)).sum();
        let pool_savings = if spans && source > 0.0 {
            savings * pool_source / source
        } else {
            savings
        };
        let disruption: f64 = nodes.iter().map(|n| n.disruption).sum();
        let score = score_move(
            pool_savings,
            disruption,
            totals.get(*pool).copied().unwrap_or_default(),
            K,
        );
        approved &= score.approved();
        scores.insert((*pool).to_owned(), score);
    }
    (approved, scores)
}

/// Translations of Karpenter's scoring tests
/// (kubernetes-sigs/karpenter `pkg/controllers/disruption/balanced_test.go`,
/// `balanced_scoring_test.go`, `balanced_adversarial_test.go`); each test
/// names the `It` it translates. Prices are real on-demand prices ($/h):
/// m7i.large $0.1008, m7i.xlarge $0.2016, m7i.2xlarge $0.4032 — the RFC's
/// example pool of eight m7i.xlarge and two m7i.2xlarge holding 80 pods.
/// Where the decision code uses these functions, the `balanced_*` tests of
/// `disruption::tests` hold it to the same cases on a cluster.
#[cfg(test)]
mod tests {
    use super::*;

    const LARGE: f64 = 0.1008;
    const XLARGE: f64 = 0.2016;
    const XLARGE2: f64 = 0.4032;

    /// The RFC's pool: $2.4192/h, disruption 90 (10 nodes + 80 pods).
    fn rfc_pool() -> PoolTotals {
        PoolTotals {
            cost: 8.0 * XLARGE + 2.0 * XLARGE2,
            disruption: 90.0,
        }
    }

    fn expected(savings: f64, disruption: f64, t: PoolTotals) -> f64 {
        (savings / t.cost) / (disruption / t.disruption)
    }

    fn node<'a>(
        name: &'a str,
        pool: &'a str,
        balanced: bool,
        price: f64,
        pods: usize,
    ) -> Scored<'a> {
        Scored {
            name,
            pool,
            policy: if balanced {
                ConsolidationPolicy::Balanced
            } else {
                ConsolidationPolicy::WhenEmptyOrUnderutilized
            },
            price,
            disruption: node_disruption(std::iter::repeat_n(1.0, pods)),
        }
    }

    fn names(n: usize, prefix: &str) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}-{i}")).collect()
    }

    // ---- balanced_test.go, Describe("ScoreMove")

    /// Context("when the move has clear savings") / It("should approve an oversized node consolidation"):
    /// an m7i.2xlarge replaced by an m7i.large, 3 pods.
    #[test]
    fn approves_an_oversized_node_consolidation() {
        let (savings, disruption) = (XLARGE2 - LARGE, 4.0);
        let r = score_move(savings, disruption, rfc_pool(), K);
        assert!(r.approved(), "{r:?}");
        assert!((r.value() - expected(savings, disruption, rfc_pool())).abs() < 1e-9);
        assert!((r.savings_fraction - savings / rfc_pool().cost).abs() < 1e-12);
        assert!((r.disruption_fraction - disruption / 90.0).abs() < 1e-12);
    }

    /// Context("when the move has clear savings") / It("should approve a spare capacity delete"):
    /// deleting an m7i.xlarge with 4 pods.
    #[test]
    fn approves_a_spare_capacity_delete() {
        let r = score_move(XLARGE, 5.0, rfc_pool(), K);
        assert!(r.approved(), "{r:?}");
        assert!((r.value() - expected(XLARGE, 5.0, rfc_pool())).abs() < 1e-9);
    }

    /// Context("when the move is marginal or harmful") / It("should reject a marginal move"):
    /// an m7i.xlarge with 8 pods replaced by an m7i.large.
    #[test]
    fn rejects_a_marginal_move() {
        let r = score_move(XLARGE - LARGE, 9.0, rfc_pool(), K);
        assert!(!r.approved(), "{r:?}");
        assert!((r.value() - expected(XLARGE - LARGE, 9.0, rfc_pool())).abs() < 1e-9);
        assert!(r.value() < 0.5 && r.value() > 0.4);
    }

    /// Context("when the move is marginal or harmful") / It("should reject a well-packed node with zero savings").
    #[test]
    fn rejects_a_well_packed_node_with_zero_savings() {
        let r = score_move(0.0, 11.0, rfc_pool(), K);
        assert!(!r.approved());
        assert_eq!(r.value(), 0.0);
    }

    /// Context("when the pool is uniform") / It("should approve a replace in a uniform pool"):
    /// ten m7i.xlarge; the marginal move of above scores exactly 1/k there.
    #[test]
    fn approves_a_replace_in_a_uniform_pool() {
        let uniform = PoolTotals {
            cost: 10.0 * XLARGE,
            disruption: 90.0,
        };
        let r = score_move(XLARGE - LARGE, 9.0, uniform, K);
        assert!(r.approved(), "{r:?}");
        assert!((r.value() - expected(XLARGE - LARGE, 9.0, uniform)).abs() < 1e-9);
    }

    /// Context("when disruption costs vary across nodes") / It("should approve low-disruption nodes and reject high-disruption nodes").
    #[test]
    fn approves_low_disruption_nodes_and_rejects_high_disruption_nodes() {
        let het = PoolTotals {
            cost: rfc_pool().cost,
            disruption: 117.0,
        };
        let a = score_move(XLARGE, 5.0, het, K);
        assert!(a.approved(), "{a:?}");
        assert!((a.value() - expected(XLARGE, 5.0, het)).abs() < 1e-9);
        let b = score_move(XLARGE, 32.0, het, K);
        assert!(!b.approved(), "{b:?}");
        assert!((b.value() - expected(XLARGE, 32.0, het)).abs() < 1e-9);
    }

    /// Context("scale invariance") / It("should produce the same score regardless of pool size").
    #[test]
    fn the_score_does_not_depend_on_the_pool_size() {
        let ten = score_move(XLARGE2 - LARGE, 4.0, rfc_pool(), K);
        let hundred = score_move(
            XLARGE2 - LARGE,
            4.0,
            PoolTotals {
                cost: 10.0 * rfc_pool().cost,
                disruption: 900.0,
            },
            K,
        );
        // Ten times the pool, the same move: a tenth of both shares, the same score.
        assert!((ten.value() - hundred.value()).abs() < 1e-9);
        assert!((ten.savings_fraction - 10.0 * hundred.savings_fraction).abs() < 1e-9);
        let scaled = score_move(
            10.0 * (XLARGE2 - LARGE),
            40.0,
            PoolTotals {
                cost: 10.0 * rfc_pool().cost,
                disruption: 900.0,
            },
            K,
        );
        assert!((ten.value() - scaled.value()).abs() < 1e-9);
        assert!((ten.value() - expected(XLARGE2 - LARGE, 4.0, rfc_pool())).abs() < 1e-9);
    }

    /// Context("edge cases with zero values") / It("should approve with +Inf score when move disruption is zero and savings positive"),
    /// and It("should approve when move disruption is zero (division by zero guard)").
    #[test]
    fn zero_disruption_with_savings_scores_infinity() {
        let r = score_move(XLARGE, 0.0, rfc_pool(), K);
        assert!(r.approved());
        assert!(r.value().is_infinite() && r.value() > 0.0);
    }

    /// Context("edge cases with zero values") / It("should reject when both savings and disruption are zero").
    #[test]
    fn zero_savings_and_zero_disruption_is_rejected() {
        let r = score_move(0.0, 0.0, rfc_pool(), K);
        assert!(!r.approved());
        assert_eq!(r.value(), 0.0);
    }

    /// Context("edge cases with zero values") / It("should reject when nodepool cost is zero").
    #[test]
    fn a_pool_of_zero_cost_rejects() {
        let zero = PoolTotals {
            cost: 0.0,
            disruption: 90.0,
        };
        let r = score_move(XLARGE, 5.0, zero, K);
        assert!(!r.approved());
        assert_eq!(r.value(), 0.0);
        assert_eq!(r.k, K);
    }

    /// Context("consolidation threshold tuning") / It("should reject at k=2 for a marginal move"),
    /// It("should approve at k=3 for the same move"), It("should reject at k=1 for the same move").
    /// nodewright's k is fixed at 2 ([`K`]); the score function takes any.
    #[test]
    fn the_threshold_is_one_over_k() {
        let at = |k| score_move(XLARGE - LARGE, 9.0, rfc_pool(), k);
        assert!(!at(2).approved(), "{:?}", at(2));
        assert!(at(3).approved(), "{:?}", at(3));
        assert!(!at(1).approved(), "{:?}", at(1));
        assert!((at(3).threshold() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(at(1).threshold(), 1.0);
        assert_eq!(K, 2);
    }

    /// Context("cross-NodePool scoring") / It("should produce identical scores for proportionally equivalent moves"):
    /// an on-demand pool of ten m7i.xlarge and a spot pool of ten at $0.0604/h.
    #[test]
    fn proportionally_equivalent_moves_score_the_same() {
        let od = score_move(
            XLARGE,
            4.0,
            PoolTotals {
                cost: 10.0 * XLARGE,
                disruption: 90.0,
            },
            K,
        );
        let spot = score_move(
            0.0604,
            4.0,
            PoolTotals {
                cost: 10.0 * 0.0604,
                disruption: 90.0,
            },
            K,
        );
        assert!((od.value() - spot.value()).abs() < 1e-9);
        assert!(od.approved() && spot.approved());
    }

    // ---- balanced_scoring_test.go, Describe("Balanced Scoring")

    /// Describe("computeNodePoolTotals") / It("should produce totals from ALL candidates, not just a filtered subset").
    #[test]
    fn totals_count_every_node_of_the_pool() {
        let n = names(5, "node");
        let nodes: Vec<_> = n
            .iter()
            .map(|x| node(x, "pool-a", true, XLARGE, 1))
            .collect();
        let totals = pool_totals(&nodes);
        let t = totals["pool-a"];
        assert!((t.cost - 5.0 * XLARGE).abs() < 1e-12);
        assert_eq!(t.disruption, 10.0);
    }

    /// Describe("computeNodePoolTotals") / It("should accumulate disruption from zero-priced candidates"):
    /// a node whose instance type the catalog does not price costs 0 but still counts its disruption.
    #[test]
    fn an_unpriced_node_adds_disruption_but_no_cost() {
        let nodes = [
            node("good-1", "pool-b", true, XLARGE, 1),
            node("unpriced", "pool-b", true, 0.0, 1),
            node("good-2", "pool-b", true, XLARGE, 1),
        ];
        let t = pool_totals(&nodes)["pool-b"];
        assert!((t.cost - 2.0 * XLARGE).abs() < 1e-12);
        assert_eq!(t.disruption, 6.0);
    }

    /// Describe("EvaluateBalancedMove") / It("should reject when command has zero candidates").
    #[test]
    fn a_move_of_no_node_is_rejected() {
        let totals = BTreeMap::from([(
            "pool-a".to_owned(),
            PoolTotals {
                cost: 100.0,
                disruption: 50.0,
            },
        )]);
        let (approved, scores) = evaluate(&[], 1.0, &totals);
        assert!(!approved);
        assert!(scores.is_empty());
    }

    /// Describe("EvaluateBalancedMove") / It("should skip non-Balanced pools and approve unconditionally").
    #[test]
    fn other_policies_are_not_scored() {
        let n = names(5, "node");
        let nodes: Vec<_> = n
            .iter()
            .map(|x| node(x, "pool-nobalanced", false, XLARGE, 1))
            .collect();
        let totals = pool_totals(&nodes);
        let (approved, scores) = evaluate(&nodes[..2], 2.0 * XLARGE, &totals);
        assert!(approved);
        assert!(!scores.contains_key("pool-nobalanced"));
    }

    /// Describe("EvaluateBalancedMove") / It("should reject when candidate NodePool is missing from totals map").
    #[test]
    fn a_pool_missing_from_the_totals_rejects() {
        let moved = [node("node-0", "pool-missing", true, XLARGE, 1)];
        let (approved, scores) = evaluate(&moved, XLARGE, &BTreeMap::new());
        assert!(!approved);
        let s = scores["pool-missing"];
        assert_eq!(s.value(), 0.0);
        assert!(!s.approved());
    }

    /// Describe("EvaluateBalancedMove") / It("should approve a delete command for a single Balanced NodePool"):
    /// one of ten like nodes: 10 % of the cost for 10 % of the disruption.
    #[test]
    fn deleting_one_of_ten_like_nodes_scores_one() {
        let n = names(10, "node");
        let nodes: Vec<_> = n
            .iter()
            .map(|x| node(x, "pool-single", true, XLARGE, 1))
            .collect();
        let totals = pool_totals(&nodes);
        let (approved, scores) = evaluate(&nodes[..1], XLARGE, &totals);
        assert!(approved);
        assert!((scores["pool-single"].value() - 1.0).abs() < 1e-9);
    }

    /// Describe("EvaluateBalancedMove") / It("should attribute savings proportionally in cross-NodePool scenarios"):
    /// one node of a Balanced pool and one of another pool deleted together; the
    /// Balanced pool is credited half the savings, not all of it.
    #[test]
    fn savings_are_split_by_price_across_pools() {
        let b = names(5, "b");
        let e = names(5, "e");
        let mut nodes: Vec<_> = b
            .iter()
            .map(|x| node(x, "pool-balanced", true, XLARGE, 1))
            .collect();
        nodes.extend(e.iter().map(|x| node(x, "pool-other", false, XLARGE, 1)));
        let totals = pool_totals(&nodes);
        let moved = [nodes[0].clone(), nodes[5].clone()];
        let (approved, scores) = evaluate(&moved, 2.0 * XLARGE, &totals);
        assert!(approved);
        // Half of $0.4032/h over a $1.008/h pool, for 2 of its 10 disruption.
        assert!((scores["pool-balanced"].value() - 1.0).abs() < 1e-9);
        assert_eq!(scores.len(), 1);
    }

    /// Describe("EvaluateBalancedMove") / Context("AllPoolsMustApprove") / It("should reject when any Balanced pool rejects"):
    /// pool A (ten light nodes) approves deleting one; pool B (three nodes,
    /// one holding 40 pods) refuses deleting the heavy one; the move is refused.
    #[test]
    fn every_balanced_pool_must_approve() {
        let a = names(10, "a");
        let mut nodes: Vec<_> = a
            .iter()
            .map(|x| node(x, "pool-a", true, XLARGE, 1))
            .collect();
        nodes.push(node("b-heavy", "pool-b", true, LARGE, 40));
        nodes.push(node("b-light-1", "pool-b", true, LARGE, 1));
        nodes.push(node("b-light-2", "pool-b", true, LARGE, 1));
        let totals = pool_totals(&nodes);
        let moved = [nodes[0].clone(), nodes[10].clone()];
        let (approved, scores) = evaluate(&moved, XLARGE + LARGE, &totals);
        assert!(scores["pool-a"].approved(), "{:?}", scores["pool-a"]);
        assert!(!scores["pool-b"].approved(), "{:?}", scores["pool-b"]);
        assert!(!approved);
        // Without pool B's node the same pool-A deletion passes.
        let (alone, _) = evaluate(&moved[..1], XLARGE, &totals);
        assert!(alone);
    }

    /// Describe("sumCandidatePrices") / It("should return 0 for nil instanceType") and
    /// It("should return the offering price for a valid instanceType"); balanced_adversarial_test.go
    /// It("should sum candidate costs correctly with nil instanceType"). Here a node's price is what its
    /// claim was launched at, or the catalog's offering for its type, zone and capacity type, or 0.
    #[test]
    fn prices_add_up_with_unknown_ones_as_zero() {
        assert_eq!(sum_prices(&[node("n", "p", true, 0.0, 0)]), 0.0);
        assert!((sum_prices(&[node("n2", "p", true, XLARGE, 0)]) - XLARGE).abs() < 1e-12);
        let mixed = [
            node("good-1", "p", true, XLARGE, 1),
            node("unpriced", "p", true, 0.0, 1),
            node("good-2", "p", true, XLARGE, 1),
        ];
        assert!((sum_prices(&mixed) - 2.0 * XLARGE).abs() < 1e-12);
    }

    /// Describe("Candidate.SavingsRatio") / It("should compute expected ratios for different configurations").
    #[test]
    fn savings_ratio_is_price_over_disruption() {
        assert!((node("n", "p", true, XLARGE, 0).savings_ratio() - XLARGE).abs() < 1e-12);
        assert!((node("n2", "p", true, XLARGE, 3).savings_ratio() - XLARGE / 4.0).abs() < 1e-12);
        assert_eq!(node("n3", "p", true, 0.0, 3).savings_ratio(), 0.0);
    }

    /// Describe("ScoreMove (SavingsRatio)") / DescribeTable("should compute correct scores"): its six
    /// entries on a pool of $1/h and disruption 100 (the table's fractions).
    #[test]
    fn score_table() {
        let t = PoolTotals {
            cost: 1.0,
            disruption: 100.0,
        };
        // (entry, savings, disruption, score, approved); None: +Inf.
        let table: [(&str, f64, f64, Option<f64>, bool); 6] = [
            ("high savings low disruption", 0.20, 5.0, Some(4.0), true),
            ("equal fractions", 0.10, 10.0, Some(1.0), true),
            ("low savings high disruption", 0.05, 50.0, Some(0.10), false),
            ("zero disruption cost", 0.10, 0.0, None, true),
            ("zero savings", 0.0, 10.0, Some(0.0), false),
            ("negative savings", -0.05, 10.0, Some(0.0), false),
        ];
        for (entry, savings, disruption, score, approved) in table {
            let r = score_move(savings, disruption, t, 2);
            match score {
                Some(s) => assert!((r.value() - s).abs() < 1e-9, "{entry}: {}", r.value()),
                None => assert!(r.value().is_infinite(), "{entry}: {}", r.value()),
            }
            assert_eq!(r.approved(), approved, "{entry}");
        }
    }

    /// balanced_adversarial_test.go It("should not allow NaN price to poison NodePool totals"):
    /// a catalog price that is not a number counts 0, and the score stays a number.
    #[test]
    fn a_nan_price_does_not_poison_the_totals() {
        let nodes = [
            node("good-1", "pool-nan", true, XLARGE, 1),
            node("nan", "pool-nan", true, f64::NAN, 1),
            node("good-2", "pool-nan", true, XLARGE, 1),
        ];
        let t = pool_totals(&nodes)["pool-nan"];
        assert!((t.cost - 2.0 * XLARGE).abs() < 1e-12);
        assert!(!score_move(XLARGE, 2.0, t, 2).value().is_nan());
        assert!(!sum_prices(&nodes).is_nan());
        assert!(!nodes[1].savings_ratio().is_nan());
    }

    /// balanced_adversarial_test.go It("should populate perPool entries for all pools even on early return"):
    /// a move over two Balanced pools, the first refusing, scores both, each with its k.
    #[test]
    fn every_balanced_pool_of_a_refused_move_is_scored() {
        let mut nodes = vec![
            node("a-0", "pool-a", true, XLARGE, 20),
            node("a-1", "pool-a", true, XLARGE, 1),
        ];
        let b = names(10, "b");
        nodes.extend(b.iter().map(|x| node(x, "pool-b", true, XLARGE, 1)));
        let totals = pool_totals(&nodes);
        // Replaced, not deleted: a quarter of the source price saved.
        let moved = [nodes[0].clone(), nodes[2].clone()];
        let (approved, scores) = evaluate(&moved, 0.5 * XLARGE, &totals);
        assert!(!approved);
        assert!(!scores["pool-a"].approved(), "{:?}", scores["pool-a"]);
        for pool in ["pool-a", "pool-b"] {
            assert_eq!(scores[pool].k, K, "{pool}");
        }
    }

    /// balanced_adversarial_test.go It("should approve single-node pool DELETE with expected scoring"):
    /// deleting the only node of a pool saves all its cost for all its disruption.
    #[test]
    fn deleting_the_only_node_of_a_pool_scores_one() {
        let nodes = [node("only", "pool-single", true, XLARGE, 1)];
        let (approved, scores) = evaluate(&nodes, XLARGE, &pool_totals(&nodes));
        assert!(approved);
        let s = scores["pool-single"];
        assert!(s.savings_fraction >= 1.0 - 1e-12);
        assert!((s.value() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_score_in_words() {
        let ok = score_move(XLARGE2 - LARGE, 4.0, rfc_pool(), K);
        assert!(
            ok.describe("default").contains(">= threshold 0.50, k: 2"),
            "{}",
            ok.describe("default")
        );
        let no = score_move(XLARGE - LARGE, 9.0, rfc_pool(), K);
        assert!(
            no.describe("default").contains("does not justify"),
            "{}",
            no.describe("default")
        );
    }
}
