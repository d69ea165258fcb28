//! HAProxy's stats socket: `show stat` as CSV, one row as field name → value.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// HAProxy `show stat` over its stats socket: the FRONTEND row of `frontend`
/// as field name → value.
pub fn haproxy_frontend_stats(
    sock: &Path,
    frontend: &str,
) -> Result<HashMap<String, String>, String> {
    let mut s = UnixStream::connect(sock).map_err(|e| format!("{}: {e}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(b"show stat\n").map_err(|e| e.to_string())?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).map_err(|e| e.to_string())?;
    parse_haproxy_csv(&buf, frontend, "FRONTEND")
}

pub fn parse_haproxy_csv(
    csv: &str,
    pxname: &str,
    svname: &str,
) -> Result<HashMap<String, String>, String> {
    let mut lines = csv.lines();
    let header = lines.next().ok_or("empty stats")?;
    let names: Vec<&str> = header.trim_start_matches("# ").split(',').collect();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        if f.first() == Some(&pxname) && f.get(1) == Some(&svname) {
            return Ok(names
                .iter()
                .zip(f.iter())
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect());
        }
    }
    Err(format!("no {pxname}/{svname} row in HAProxy stats"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haproxy_csv() {
        let csv = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout\n\
                   fe,FRONTEND,,,3,10,20000,1234,100,200\n\
                   be,db,0,0,3,10,,1234,100,200\n";
        let r = parse_haproxy_csv(csv, "fe", "FRONTEND").unwrap();
        assert_eq!(r["stot"], "1234");
        assert_eq!(r["bout"], "200");
        assert!(parse_haproxy_csv(csv, "nope", "FRONTEND").is_err());
    }
}
