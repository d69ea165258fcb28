//! MariaDB GTID positions (`@@gtid_binlog_pos`, `@@gtid_slave_pos`,
//! `@@gtid_current_pos`, `Gtid_IO_Pos`): a comma-separated list of
//! `domain-server_id-seq_no`, at most one per domain.
//!
//! Positions are compared per domain by sequence number only. After a
//! failover the new primary keeps the domain and the sequence but writes its
//! own server_id (`0-1-2028` is followed by `0-2-2029`), so comparing the
//! text, or the server ids, orders them wrongly; MASTER_GTID_WAIT ignores
//! the server_id too.

use std::collections::BTreeMap;
use std::fmt;

/// One GTID: `domain-server_id-seq_no`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gtid {
    pub domain: u32,
    pub server_id: u32,
    pub seq_no: u64,
}

/// Why a GTID list did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GtidError {
    #[error("GTID {0:?} is not domain-server_id-seq_no")]
    Shape(String),
    #[error("GTID list names domain {0} twice")]
    DuplicateDomain(u32),
}

impl std::str::FromStr for Gtid {
    type Err = GtidError;

    fn from_str(s: &str) -> Result<Gtid, GtidError> {
        let shape = || GtidError::Shape(s.to_owned());
        let mut parts = s.trim().split('-');
        let mut next = || parts.next().ok_or_else(shape);
        let domain = next()?.parse().map_err(|_| shape())?;
        let server_id = next()?.parse().map_err(|_| shape())?;
        let seq_no = next()?.parse().map_err(|_| shape())?;
        if parts.next().is_some() {
            return Err(shape());
        }
        Ok(Gtid {
            domain,
            server_id,
            seq_no,
        })
    }
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server_id, self.seq_no)
    }
}

/// A GTID position: the last GTID of each replication domain. Empty is a
/// valid position (a primary's `@@gtid_slave_pos`, a fresh server).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidPos {
    /// domain → (server_id, seq_no).
    domains: BTreeMap<u32, Gtid>,
}

impl GtidPos {
    /// Parses the server's text; whitespace and newlines (which the server
    /// puts between domains in some outputs) are ignored.
    pub fn parse(text: &str) -> Result<GtidPos, GtidError> {
        let mut domains = BTreeMap::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let g: Gtid = item.parse()?;
            if domains.insert(g.domain, g).is_some() {
                return Err(GtidError::DuplicateDomain(g.domain));
            }
        }
        Ok(GtidPos { domains })
    }

    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// The position of one GTID.
    pub fn of(gtid: Gtid) -> GtidPos {
        GtidPos {
            domains: BTreeMap::from([(gtid.domain, gtid)]),
        }
    }

    /// Raise each domain to `other`'s GTID where `other`'s sequence number
    /// is higher (or the domain is new here): the position that covers
    /// both.
    pub fn raise(&mut self, other: &GtidPos) {
        for g in other.iter() {
            let mine = self.domains.entry(g.domain).or_insert(g);
            if g.seq_no > mine.seq_no {
                *mine = g;
            }
        }
    }

    /// The position's GTID in `domain`.
    pub fn get(&self, domain: u32) -> Option<Gtid> {
        self.domains.get(&domain).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = Gtid> + '_ {
        self.domains.values().copied()
    }

    /// Whether this position has everything `other` has: in every domain of
    /// `other`, a sequence number at least as high. (A domain this position
    /// has never seen means it has not.)
    pub fn covers(&self, other: &GtidPos) -> bool {
        other
            .iter()
            .all(|o| self.get(o.domain).is_some_and(|g| g.seq_no >= o.seq_no))
    }

    /// Transactions this position lacks of `other`, summed over domains: a
    /// count, not a time, and only a lower bound when sequence numbers skip.
    pub fn behind(&self, other: &GtidPos) -> u64 {
        other
            .iter()
            .map(|o| {
                let mine = self.get(o.domain).map_or(0, |g| g.seq_no);
                o.seq_no.saturating_sub(mine)
            })
            .sum()
    }
}

impl fmt::Display for GtidPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(s: &str) -> GtidPos {
        GtidPos::parse(s).unwrap()
    }

    #[test]
    fn parses_and_prints_lists() {
        let p = pos("0-1-5, 1-3-7\n");
        assert_eq!(
            p.get(1),
            Some(Gtid {
                domain: 1,
                server_id: 3,
                seq_no: 7
            })
        );
        assert_eq!(p.to_string(), "0-1-5,1-3-7");
        assert!(pos("").is_empty());
        assert!(pos(" ").is_empty());
    }

    #[test]
    fn refuses_what_the_server_would_refuse() {
        for bad in ["garbage", "0-1", "0-1-2-3", "-1-2", "0-x-2", "0-1-"] {
            assert!(GtidPos::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            GtidPos::parse("0-1-1,0-2-5"),
            Err(GtidError::DuplicateDomain(0))
        );
    }

    #[test]
    fn compares_by_sequence_not_by_text_or_server() {
        // After a failover: the new primary's server_id, the next seq_no.
        let old = pos("0-1-2028");
        let new = pos("0-2-2029");
        assert!(new.covers(&old));
        assert!(!old.covers(&new));
        assert_eq!(old.behind(&new), 1);
        // As text "0-1-9" > "0-1-10"; by sequence it is behind.
        assert!(!pos("0-1-9").covers(&pos("0-1-10")));
        assert_eq!(pos("0-1-9").behind(&pos("0-1-10")), 1);
        // The server_id does not count: the same seq_no is the same place.
        assert!(pos("0-9-3").covers(&pos("0-1-3")));
    }

    #[test]
    fn raise_keeps_the_highest_sequence_per_domain() {
        let mut p = pos("0-1-10,1-1-3");
        p.raise(&pos("0-2-9,1-2-4,2-1-1"));
        // 0-2-9 is older than 0-1-10 whatever its server; 1 and 2 move.
        assert_eq!(p.to_string(), "0-1-10,1-2-4,2-1-1");
        p.raise(&GtidPos::of("0-3-11".parse().unwrap()));
        assert_eq!(p.to_string(), "0-3-11,1-2-4,2-1-1");
        assert!(p.covers(&pos("0-1-11,1-1-4")));
    }

    #[test]
    fn a_domain_not_seen_is_not_covered() {
        assert!(!pos("0-1-5").covers(&pos("0-1-5,5-1-1")));
        assert_eq!(pos("0-1-5").behind(&pos("0-1-5,5-1-3")), 3);
        assert!(pos("0-1-5,5-1-1").covers(&pos("0-1-4")));
        assert!(pos("0-1-5").covers(&GtidPos::default()));
        assert!(GtidPos::default().covers(&GtidPos::default()));
    }
}
