//! The profiles (quick, full, smoke): which cells, targets and timings a run has.

use std::time::Duration;

use super::Res;

/// What a run measures and for how long.
#[derive(Clone, Debug)]
pub struct Profile {
    pub name: String,
    pub connect: Vec<usize>,
    pub select: Vec<usize>,
    /// (row bytes, concurrency)
    pub large: Vec<(u64, usize)>,
    pub rounds: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub warmup_round: bool,
    pub sysbench: bool,
    pub sysbench_time: u64,
    pub sysbench_threads: Vec<usize>,
    pub table_size: u64,
    pub targets: Vec<String>,
}

/// The named profile's defaults (the options override them).
pub fn profile(name: &str) -> Res<Profile> {
    let all = || {
        ["fixed", "busy", "tx", "ring", "heap", "direct", "haproxy"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    Ok(match name {
        "quick" => Profile {
            name: name.into(),
            connect: vec![16, 128, 512],
            select: vec![1, 16, 128],
            large: vec![(64 << 10, 8), (1 << 20, 8)],
            rounds: 3,
            warmup: Duration::from_millis(500),
            duration: Duration::from_millis(1500),
            warmup_round: false,
            sysbench: true,
            sysbench_time: 6,
            sysbench_threads: vec![16],
            table_size: 10_000,
            targets: all(),
        },
        "full" => Profile {
            name: name.into(),
            connect: vec![16, 128, 512, 1024],
            select: vec![1, 16, 128, 512],
            large: vec![(64 << 10, 8), (1 << 20, 8), (64 << 10, 64)],
            rounds: 5,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(5),
            warmup_round: true,
            sysbench: true,
            sysbench_time: 30,
            sysbench_threads: vec![16, 128],
            table_size: 100_000,
            targets: all(),
        },
        "smoke" => Profile {
            name: name.into(),
            connect: vec![16],
            select: vec![16],
            large: vec![(64 << 10, 2), (1 << 20, 2)],
            rounds: 2,
            warmup: Duration::from_millis(200),
            duration: Duration::from_millis(500),
            warmup_round: false,
            sysbench: false,
            sysbench_time: 2,
            sysbench_threads: vec![4],
            table_size: 1_000,
            targets: vec!["fixed".into(), "direct".into()],
        },
        other => return Err(format!("unknown profile {other:?} (quick, full, smoke)")),
    })
}
