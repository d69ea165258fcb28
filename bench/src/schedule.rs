//! The round scheduler: for each measurement cell (scenario × concurrency),
//! every target runs once per round, interleaved (A B C D, then B C D A, ...),
//! so that drift on a noisy machine hits all targets alike and no target is
//! always first after a cell change. An optional warm-up round, not recorded,
//! comes first.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Index into the cell list.
    pub cell: usize,
    /// Index into the target list.
    pub target: usize,
    /// Round number (0-based), or `None` for the unrecorded warm-up.
    pub round: Option<usize>,
}

/// Builds the run order. With `rotate`, round r starts at target r mod n
/// (A B C D, B C D A, ...); without, every round is A B C D.
pub fn schedule(
    cells: usize,
    targets: usize,
    rounds: usize,
    warmup_round: bool,
    rotate: bool,
) -> Vec<Step> {
    let mut steps = Vec::with_capacity(cells * targets * (rounds + 1));
    if targets == 0 {
        return steps;
    }
    for cell in 0..cells {
        if warmup_round {
            for target in 0..targets {
                steps.push(Step {
                    cell,
                    target,
                    round: None,
                });
            }
        }
        for round in 0..rounds {
            let start = if rotate { round % targets } else { 0 };
            for k in 0..targets {
                steps.push(Step {
                    cell,
                    target: (start + k) % targets,
                    round: Some(round),
                });
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets_of(steps: &[Step]) -> Vec<usize> {
        steps.iter().map(|s| s.target).collect()
    }

    #[test]
    fn plain_interleaving() {
        let s = schedule(1, 4, 2, false, false);
        assert_eq!(targets_of(&s), vec![0, 1, 2, 3, 0, 1, 2, 3]);
        assert!(s[..4].iter().all(|x| x.round == Some(0)));
        assert!(s[4..].iter().all(|x| x.round == Some(1)));
    }

    #[test]
    fn rotation_moves_the_first_target() {
        let s = schedule(1, 4, 5, false, true);
        assert_eq!(
            targets_of(&s),
            vec![0, 1, 2, 3, 1, 2, 3, 0, 2, 3, 0, 1, 3, 0, 1, 2, 0, 1, 2, 3]
        );
    }

    #[test]
    fn every_round_has_every_target_once() {
        for &(cells, targets, rounds) in &[(3, 4, 3), (8, 2, 5), (1, 1, 1), (2, 3, 7)] {
            let s = schedule(cells, targets, rounds, true, true);
            assert_eq!(s.len(), cells * targets * (rounds + 1));
            for cell in 0..cells {
                let of_cell: Vec<&Step> = s.iter().filter(|x| x.cell == cell).collect();
                // Cells are contiguous and in order.
                let first = s.iter().position(|x| x.cell == cell).unwrap();
                assert!(s[first..first + of_cell.len()]
                    .iter()
                    .all(|x| x.cell == cell));
                // The warm-up round comes first and covers every target.
                let warm: Vec<usize> = of_cell
                    .iter()
                    .take_while(|x| x.round.is_none())
                    .map(|x| x.target)
                    .collect();
                assert_eq!(warm, (0..targets).collect::<Vec<_>>());
                for r in 0..rounds {
                    let mut t: Vec<usize> = of_cell
                        .iter()
                        .filter(|x| x.round == Some(r))
                        .map(|x| x.target)
                        .collect();
                    // Contiguous: a round is not split by another round.
                    let pos: Vec<usize> = s
                        .iter()
                        .enumerate()
                        .filter(|(_, x)| x.cell == cell && x.round == Some(r))
                        .map(|(i, _)| i)
                        .collect();
                    assert_eq!(pos.last().unwrap() - pos[0] + 1, targets);
                    t.sort();
                    assert_eq!(t, (0..targets).collect::<Vec<_>>());
                }
            }
        }
    }

    #[test]
    fn no_targets_no_steps() {
        assert!(schedule(3, 0, 3, true, true).is_empty());
        assert!(schedule(0, 4, 3, true, true).is_empty());
    }
}
