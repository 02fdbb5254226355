//! Pareto fronts of two objectives to minimise (CPU and memory in
//! Demeter's case), and the hypervolume they dominate: the measure of how
//! good a front is, and so of how well the optimiser converges.

/// Whether `a` dominates `b`: no worse in both objectives, better in one.
pub(crate) fn dominates(a: [f64; 2], b: [f64; 2]) -> bool {
    a[0] <= b[0] && a[1] <= b[1] && (a[0] < b[0] || a[1] < b[1])
}

/// The indices of the points no other point dominates, sorted by the
/// first objective. Equal points keep the first.
pub(crate) fn front(points: &[[f64; 2]]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..points.len()).collect();
    crate::cold_sort::sort_by(&mut order, |&a, &b| {
        points[a][0]
            .total_cmp(&points[b][0])
            .then(points[a][1].total_cmp(&points[b][1]))
            .then(a.cmp(&b))
    });
    // Sweep in order of the first objective: a point is on the front iff
    // its second objective is below every one seen before it.
    let mut out = Vec::new();
    let mut best = f64::INFINITY;
    for i in order {
        if points[i][1] < best {
            best = points[i][1];
            out.push(i);
        }
    }
    out
}

/// The area dominated by `points` and bounded by `reference` (points not
/// below the reference in both objectives add nothing).
pub(crate) fn hypervolume(points: &[[f64; 2]], reference: [f64; 2]) -> f64 {
    let inside: Vec<[f64; 2]> = points
        .iter()
        .copied()
        .filter(|p| p[0] < reference[0] && p[1] < reference[1])
        .collect();
    let mut area = 0.0;
    let mut ceiling = reference[1];
    for i in front(&inside) {
        let p = inside[i];
        area += (reference[0] - p[0]) * (ceiling - p[1]);
        ceiling = p[1];
    }
    area
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_keeps_only_undominated_points() {
        let points = [[1.0, 5.0], [2.0, 3.0], [3.0, 4.0], [4.0, 1.0], [2.0, 3.0]];
        assert_eq!(front(&points), vec![0, 1, 3]);
        assert!(dominates([2.0, 3.0], [3.0, 4.0]));
        assert!(!dominates([2.0, 3.0], [2.0, 3.0]));
        assert!(!dominates([1.0, 5.0], [4.0, 1.0]));
    }

    #[test]
    fn hypervolume_is_the_union_of_the_dominated_boxes() {
        // Boxes to (4,4): [1,4]x[2,4] = 6 and [2,4]x[1,2] = 2.
        let hv = hypervolume(
            &[[1.0, 2.0], [2.0, 1.0], [3.0, 3.0], [5.0, 0.0]],
            [4.0, 4.0],
        );
        assert!((hv - 8.0).abs() < 1e-12, "{hv}");
        assert_eq!(hypervolume(&[], [1.0, 1.0]), 0.0);
        // Brute force on a grid agrees on random fronts.
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..20 {
            let pts: Vec<[f64; 2]> = (0..6).map(|_| [next(), next()]).collect();
            let n = 400;
            let mut cells = 0;
            for i in 0..n {
                for j in 0..n {
                    let c = [(i as f64 + 0.5) / n as f64, (j as f64 + 0.5) / n as f64];
                    if pts.iter().any(|p| p[0] <= c[0] && p[1] <= c[1]) {
                        cells += 1;
                    }
                }
            }
            let grid = cells as f64 / (n * n) as f64;
            let exact = hypervolume(&pts, [1.0, 1.0]);
            assert!((grid - exact).abs() < 0.01, "{grid} vs {exact}");
        }
    }
}
