//! `--read-write-split`: which replica a read goes to. Each worker keeps
//! one [`ReplicaChooser`] and asks it at every read's lease, with the
//! replicas that qualify now (up, a replica, within their `max-lag`, a
//! weight above 0: the driver reads that off the monitor's view). Smooth
//! weighted round robin, as nginx's upstreams: over any run of picks each
//! replica gets its weight's share, spread out rather than in bursts
//! (weights 2:1 give a, b, a, a, b, a, …), and the same candidates always
//! give the same sequence. No candidate: None, and the read goes to the
//! writer.

/// A replica that may take reads now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Its index in the `--backend` list.
    pub server: u16,
    /// Its configured `weight` (above 0).
    pub weight: u32,
}

/// One worker's round-robin state: each server's running score.
#[derive(Debug, Default)]
pub struct ReplicaChooser {
    /// By server index; a server that is no candidate at a pick starts
    /// again from 0 when it is one again, so a replica that comes back
    /// gets its share at once rather than a burst to catch up.
    current: Vec<i64>,
}

impl ReplicaChooser {
    /// The replica for the next read, among `candidates` (None: no
    /// replica qualifies).
    pub fn pick(&mut self, candidates: &[Candidate]) -> Option<u16> {
        let top = candidates.iter().map(|c| usize::from(c.server)).max()?;
        if self.current.len() <= top {
            self.current.resize(top + 1, 0);
        }
        let mut total: i64 = 0;
        let mut best: Option<(u16, i64)> = None;
        for c in candidates.iter().filter(|c| c.weight > 0) {
            let score = &mut self.current[usize::from(c.server)];
            *score += i64::from(c.weight);
            total += i64::from(c.weight);
            // Ties go to the first in configured order: deterministic.
            if best.is_none_or(|(_, b)| *score > b) {
                best = Some((c.server, *score));
            }
        }
        for (server, score) in self.current.iter_mut().enumerate() {
            let candidate = candidates.iter().any(|c| usize::from(c.server) == server);
            if !candidate {
                *score = 0;
            }
        }
        let (server, _) = best?;
        self.current[usize::from(server)] -= total;
        Some(server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(server: u16, weight: u32) -> Candidate {
        Candidate { server, weight }
    }

    fn picks(chooser: &mut ReplicaChooser, cands: &[Candidate], n: usize) -> Vec<u16> {
        (0..n).map(|_| chooser.pick(cands).unwrap()).collect()
    }

    #[test]
    fn equal_weights_alternate() {
        let mut ch = ReplicaChooser::default();
        assert_eq!(picks(&mut ch, &[c(1, 1), c(2, 1)], 4), [1, 2, 1, 2]);
    }

    #[test]
    fn weights_give_their_share_spread_out() {
        let mut ch = ReplicaChooser::default();
        let seq = picks(&mut ch, &[c(1, 2), c(2, 1)], 6);
        assert_eq!(seq, [1, 2, 1, 1, 2, 1]);
        let mut ch = ReplicaChooser::default();
        let seq = picks(&mut ch, &[c(1, 5), c(2, 1), c(3, 1)], 700);
        let count = |s: u16| seq.iter().filter(|&&x| x == s).count();
        assert_eq!((count(1), count(2), count(3)), (500, 100, 100));
        // Never two picks of a light server in a row.
        assert!(seq.windows(2).all(|w| w[0] == 1 || w[0] != w[1]));
    }

    #[test]
    fn no_candidate_no_pick_and_weight_zero_never() {
        let mut ch = ReplicaChooser::default();
        assert_eq!(ch.pick(&[]), None);
        assert_eq!(ch.pick(&[c(1, 0)]), None);
        assert_eq!(picks(&mut ch, &[c(1, 0), c(2, 3)], 3), [2, 2, 2]);
    }

    #[test]
    fn a_replica_that_drops_out_and_comes_back_starts_even() {
        let mut ch = ReplicaChooser::default();
        picks(&mut ch, &[c(1, 1), c(2, 1)], 3);
        // Replica 1 lags: every read goes to 2.
        assert_eq!(picks(&mut ch, &[c(2, 1)], 5), [2, 2, 2, 2, 2]);
        // Back: the two alternate again, no burst on 1.
        let seq = picks(&mut ch, &[c(1, 1), c(2, 1)], 4);
        assert_eq!(seq.iter().filter(|&&s| s == 1).count(), 2);
    }
}
