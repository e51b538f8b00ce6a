//! The LP lower bound on fleet cost for pods that could all share nodes.
//!
//! minimise Σ priceₜ·xₜ subject to Σ cpuₜ·xₜ ≥ Σ pod cpu, Σ memₜ·xₜ ≥ Σ pod
//! memory, Σ podsₜ·xₜ ≥ pod count, xₜ ≥ 0 — over allocatable capacity and
//! each type's cheapest allowed offering. No integral plan can cost less, so
//! plan cost ÷ bound measures how much the packing leaves on the table.

use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOutcome};

use crate::resources::Resources;

/// One candidate instance type: USD per hour and allocatable capacity.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub price: f64,
    pub allocatable: Resources,
}

/// The bound in USD per hour, or `None` when the LP has no solution (some
/// resource is asked for that no candidate offers).
pub fn lp_lower_bound(total: &Resources, candidates: &[Candidate]) -> Option<f64> {
    if total.cpu_millis <= 0 && total.memory_bytes <= 0 && total.pods <= 0 {
        return Some(0.0);
    }
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    let vars: Vec<_> = candidates
        .iter()
        .map(|c| lp.add_var(c.price, (0.0, f64::INFINITY)))
        .collect();
    // Scale to keep coefficients near 1: cores, GiB, pods.
    let rows: [ResourceRow; 3] = [
        (
            |r| r.cpu_millis as f64 / 1000.0,
            total.cpu_millis as f64 / 1000.0,
        ),
        (
            |r| r.memory_bytes as f64 / (1u64 << 30) as f64,
            total.memory_bytes as f64 / (1u64 << 30) as f64,
        ),
        (|r| r.pods as f64, total.pods as f64),
    ];
    for (coef, rhs) in rows {
        let expr: Vec<_> = vars
            .iter()
            .zip(candidates)
            .map(|(v, c)| (*v, coef(&c.allocatable)))
            .collect();
        lp.add_constraint(expr, ComparisonOp::Ge, rhs);
    }
    match lp.solve() {
        Ok(SolveOutcome::Solution(s)) => Some(s.objective()),
        _ => None,
    }
}

/// One resource row of the bound's program: how to read it off a
/// [`Resources`], and its scale.
type ResourceRow = (fn(&Resources) -> f64, f64);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::GIB;

    #[test]
    fn bound_picks_the_cheapest_mix() {
        // A cpu-heavy and a memory-heavy type; pods need both.
        let cands = [
            Candidate {
                price: 1.0,
                allocatable: Resources::new(4000, 4 * GIB, 100),
            },
            Candidate {
                price: 1.0,
                allocatable: Resources::new(1000, 16 * GIB, 100),
            },
        ];
        let total = Resources::new(4000, 16 * GIB, 10);
        // x1·4 + x2·1 ≥ 4, x1·4 + x2·16 ≥ 16 → x1 = 0.8, x2 = 0.8 → 1.6.
        let b = lp_lower_bound(&total, &cands).expect("feasible");
        assert!((b - 1.6).abs() < 1e-6, "{b}");
        assert_eq!(lp_lower_bound(&Resources::default(), &cands), Some(0.0));
        let none = [Candidate {
            price: 1.0,
            allocatable: Resources::new(0, GIB, 1),
        }];
        assert_eq!(lp_lower_bound(&Resources::new(1000, 0, 1), &none), None);
    }
}
