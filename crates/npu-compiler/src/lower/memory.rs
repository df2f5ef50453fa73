//! Liveness-based placement of intermediate buffers in one arena.
//!
//! Invariant: two buffers whose live ranges (first write .. last read, inclusive, in step
//! indices) overlap never share bytes. Buffers are placed largest first at the lowest
//! aligned offset that fits between already placed, overlapping buffers.

use std::collections::BTreeSet;

/// Alignment of every buffer in the arena, in bytes.
pub const ALIGN: u64 = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    pub bytes: u64,
    pub first: usize,
    pub last: usize,
}

/// Returns (offset per buffer, arena size).
///
/// O((n + k) log n) for n buffers that overlap k placed buffers in all: the placed buffers
/// overlapping one are found through a segment tree over steps (those live at its first
/// step) and an ordered set of first steps (those starting inside its range), never by
/// scanning every placed buffer.
pub fn plan(bufs: &[Interval]) -> (Vec<u64>, u64) {
    let mut order: Vec<usize> = (0..bufs.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(bufs[i].bytes), bufs[i].first));
    let span = |b: &Interval| (b.first, b.last.max(b.first));
    let steps = bufs.iter().map(|b| span(b).1 + 1).max().unwrap_or(0);
    let mut live_at = Stabbing::new(steps);
    let mut starts: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut offsets = vec![0u64; bufs.len()];
    let padded = |b: &Interval| b.bytes.div_ceil(ALIGN) * ALIGN;
    let mut total = 0;
    let mut overlapping = Vec::new();
    for i in order {
        let b = &bufs[i];
        let (first, last) = span(b);
        let size = padded(b);
        overlapping.clear();
        live_at.query(first, &mut overlapping);
        if last > first {
            overlapping.extend(
                starts
                    .range((first + 1, 0)..=(last, usize::MAX))
                    .map(|&(_, j)| j),
            );
        }
        let mut taken: Vec<(u64, u64)> = overlapping
            .iter()
            .map(|&j| (offsets[j], offsets[j] + padded(&bufs[j])))
            .collect();
        taken.sort_unstable();
        let mut at = 0;
        for (s, e) in taken {
            if at + size <= s {
                break;
            }
            at = at.max(e);
        }
        offsets[i] = at;
        total = total.max(at + size);
        live_at.insert(first, last, i);
        starts.insert((first, i));
    }
    (offsets, total)
}

/// A segment tree over steps `0..n` whose nodes list the intervals covering them:
/// `query(p)` yields every inserted interval containing step `p`, each once.
struct Stabbing {
    n: usize,
    nodes: Vec<Vec<usize>>,
}

impl Stabbing {
    fn new(n: usize) -> Stabbing {
        Stabbing {
            n,
            nodes: vec![Vec::new(); 4 * n.max(1)],
        }
    }

    /// Adds interval `id` covering steps `lo..=hi` (iteratively, an explicit stack).
    fn insert(&mut self, lo: usize, hi: usize, id: usize) {
        let mut stack = vec![(1usize, 0usize, self.n.max(1) - 1)];
        while let Some((node, l, r)) = stack.pop() {
            if hi < l || r < lo {
                continue;
            }
            if lo <= l && r <= hi {
                self.nodes[node].push(id);
                continue;
            }
            let m = (l + r) / 2;
            stack.push((2 * node, l, m));
            stack.push((2 * node + 1, m + 1, r));
        }
    }

    fn query(&self, p: usize, out: &mut Vec<usize>) {
        let (mut node, mut l, mut r) = (1usize, 0usize, self.n.max(1) - 1);
        loop {
            out.extend_from_slice(&self.nodes[node]);
            if l == r {
                return;
            }
            let m = (l + r) / 2;
            if p <= m {
                node *= 2;
                r = m;
            } else {
                node = 2 * node + 1;
                l = m + 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_lifetimes_share_and_overlapping_do_not() {
        let bufs = vec![
            Interval {
                bytes: 100,
                first: 0,
                last: 1,
            },
            Interval {
                bytes: 100,
                first: 1,
                last: 2,
            },
            Interval {
                bytes: 100,
                first: 2,
                last: 3,
            },
        ];
        let (off, total) = plan(&bufs);
        assert_ne!(off[0], off[1]);
        assert_ne!(off[1], off[2]);
        assert_eq!(off[0], off[2]);
        assert_eq!(total, 256);
    }

    #[test]
    fn random_plans_never_overlap_live_buffers() {
        let mut seed = 12345u64;
        let mut rnd = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let bufs: Vec<Interval> = (0..200)
            .map(|_| {
                let first = rnd(100) as usize;
                Interval {
                    bytes: 1 + rnd(5000),
                    first,
                    last: first + rnd(20) as usize,
                }
            })
            .collect();
        let (off, total) = plan(&bufs);
        for i in 0..bufs.len() {
            assert!(off[i] + bufs[i].bytes <= total);
            for j in 0..i {
                let live = bufs[i].first <= bufs[j].last && bufs[j].first <= bufs[i].last;
                let mem = off[i] < off[j] + bufs[j].bytes && off[j] < off[i] + bufs[i].bytes;
                assert!(!(live && mem), "buffers {i} and {j} overlap");
            }
        }
    }
}
