//! What the registry is for: a client's `KILL <proxy id>` (text or
//! COM_PROCESS_KILL) and `SHOW PROCESSLIST`, recognised between commands
//! and rewritten for the backend ([`intercept`]): the KILL names the
//! backend thread that serves the target session now (fenced until the
//! server answers, see the module docs of `registry.rs`), or is refused
//! as the server would; the process list shows proxy ids.

use super::*;

/// What the session does with a recognised KILL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KillDecision {
    /// Not a connection the proxy maps: the server answers (for an unknown
    /// proxy id that is MariaDB's own 1094, since no backend thread has it).
    Forward,
    /// The same KILL (`payload`) of the backend thread that serves the
    /// target session; `own`: a session of the killer's own proxy user, so
    /// the server will carry it out.
    Kill { payload: Vec<u8>, own: bool },
    /// Not the killer's session: ERR 1095 with the id the client used.
    NotOwner { id: u64 },
    /// The target session holds no backend connection (it waits for one):
    /// nothing runs on the server; OK, as for an idle thread (a KILL
    /// CONNECTION then closes its client, see [`Rewrite::close_after_ok`]).
    Nothing,
}

impl KillDecision {
    /// The command to send to the backend in place of the client's, if
    /// any. Every answer comes from the server, even a refusal (`SIGNAL`)
    /// and a no-op (`DO 0`): its OK or ERR then carries the session's real
    /// status flags, the error lands in the diagnostics area as a real
    /// KILL's would (`SHOW WARNINGS`, `GET DIAGNOSTICS`), and the relay and
    /// its response tracker see an ordinary command and answer.
    pub fn payload(&self) -> Option<Vec<u8>> {
        let query = |sql: String| {
            let mut p = vec![COM_QUERY];
            p.extend_from_slice(sql.as_bytes());
            p
        };
        match self {
            KillDecision::Forward => None,
            KillDecision::Kill { payload, .. } => Some(payload.clone()),
            KillDecision::NotOwner { id } => Some(query(format!(
                "SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = {ER_KILL_DENIED_ERROR}, MESSAGE_TEXT = '{}'",
                kill::not_owner_message(*id)
            ))),
            KillDecision::Nothing => Some(query("DO 0".into())),
        }
    }
}

/// Decide what a KILL from `killer` (a proxy user) does.
///
/// Shared backend identity (every session is the same backend user, so the
/// server cannot tell proxy users apart): the proxy allows a KILL of a
/// session of the same proxy user only, and answers 1095 otherwise, also
/// for a raw backend thread id that serves another user's session.
/// `server_checks_owner` (each user is itself on the backend): the server
/// applies its own privilege checks to the mapped KILL.
pub fn decide_kill(
    stmt: &KillStatement,
    killer: &str,
    registry: &Registry,
    server_checks_owner: bool,
) -> KillDecision {
    decide_kill_fenced(stmt, killer, 0, registry, server_checks_owner).0
}

/// [`decide_kill`], with the fence on the target's thread when the KILL is
/// sent to it ([`KillDecision::Kill`] of a proxy id).
fn decide_kill_fenced(
    stmt: &KillStatement,
    killer: &str,
    killer_id: u32,
    registry: &Registry,
    server_checks_owner: bool,
) -> (KillDecision, Option<KillFence>) {
    let not_owner = KillDecision::NotOwner { id: stmt.id };
    if !is_proxy_id(stmt.id) {
        if server_checks_owner {
            return (KillDecision::Forward, None);
        }
        let owner = u32::try_from(stmt.id)
            .ok()
            .and_then(|t| registry.owner_of_thread(t, killer_id));
        let decision = match owner {
            Some((_, t, _)) if t.user.as_deref() != Some(killer) => not_owner,
            // The killer's own user's session, holding no connection
            // (transaction pooling): the thread it last used may serve
            // another session now, or the killer itself. Nothing runs on
            // the server for it (a KILL CONNECTION closes its client).
            Some((_, _, false)) => KillDecision::Nothing,
            _ => KillDecision::Forward,
        };
        return (decision, None);
    }
    // In range, so it fits.
    let Some((target, fence)) = registry.lookup_fenced(stmt.id as u32) else {
        return (KillDecision::Forward, None);
    };
    let same_user = target.user.as_deref() == Some(killer);
    let decision = match target.backend_thread {
        Some(thread) if same_user => KillDecision::Kill {
            payload: stmt.to_payload(thread),
            own: true,
        },
        // The server decides (CONNECTION ADMIN / SUPER); on MariaDB its
        // refusal is made to name the proxy id, not the backend thread.
        Some(thread) if server_checks_owner && registry.backend_is_mariadb() => {
            let mut payload = vec![COM_QUERY];
            payload.extend_from_slice(stmt.to_guarded_query(thread, stmt.id).as_bytes());
            KillDecision::Kill {
                payload,
                own: false,
            }
        }
        Some(thread) if server_checks_owner => KillDecision::Kill {
            payload: stmt.to_payload(thread),
            own: false,
        },
        None if same_user => KillDecision::Nothing,
        _ => not_owner,
    };
    let fence = fence.filter(|_| matches!(decision, KillDecision::Kill { .. }));
    (decision, fence)
}

/// A client command replaced by the proxy's: `packet` (framed) takes the
/// place of the first `replaces` bytes of the session buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Rewrite {
    pub replaces: usize,
    pub packet: Vec<u8>,
    /// A KILL CONNECTION of this session: once the server answers OK, close
    /// its client ([`Registry::close_client`]) before relaying the OK.
    pub close_after_ok: Option<u32>,
    /// A KILL sent to the target's backend thread: held until the server
    /// answers it (see the module docs).
    pub fence: Option<KillFence>,
}

/// If `data` (client bytes at a command boundary, nothing owed) starts with
/// a whole KILL that the proxy maps, or `SHOW [FULL] PROCESSLIST`, the
/// command to send instead. `None` leaves the bytes to the server, as they
/// are. A command split across reads, or whose rewrite would not fit in
/// `capacity`, is not intercepted: for a KILL of a proxy id the server then
/// answers 1094, never kills the wrong thread.
pub fn intercept(
    data: &[u8],
    user: &str,
    own_id: u32,
    registry: &Registry,
    capacity: usize,
) -> Option<Rewrite> {
    let server_checks_owner = registry.server_checks_owner();
    let (pkt, consumed) = split_packet(data)?;
    if pkt.seq != 0 || pkt.has_continuation() {
        return None;
    }
    let room = capacity.checked_sub(data.len() - consumed + 4)?;
    let kill = kill::parse_command(pkt.payload);
    let mut fence = None;
    let payload = match &kill {
        Some(stmt) => {
            let (decision, f) =
                decide_kill_fenced(stmt, user, own_id, registry, server_checks_owner);
            if f.is_some() {
                debug_kill_delay();
            }
            fence = f;
            let mut p = decision.payload()?;
            if !stmt.rest.is_empty() {
                // Statements after the KILL run as the client sent them
                // (every rewrite of a KILL statement is a COM_QUERY).
                p.push(b';');
                p.extend_from_slice(stmt.rest);
            }
            p
        }
        None => {
            let sql = pkt.payload.strip_prefix(&[COM_QUERY])?;
            let full = kill::parse_show_processlist(sql)?;
            processlist_query(&ProcessList {
                full,
                original: sql,
                sessions: &registry.sessions_of(user),
                only_these: !server_checks_owner,
                mariadb: registry.backend_is_mariadb(),
                max_len: room,
            })?
        }
    };
    if payload.len() > room {
        return None;
    }

    let mut packet = Vec::with_capacity(payload.len() + 4);
    write_packet(&mut packet, 0, &payload);
    Some(Rewrite {
        replaces: consumed,
        packet,
        close_after_ok: kill
            .as_ref()
            .and_then(|stmt| victim_to_close(stmt, user, own_id, registry)),
        fence,
    })
}

/// Debug builds: `RINGGATE_DEBUG_KILL_DELAY_MS=N` holds the killer's worker
/// N ms between mapping a KILL to its target's thread and sending it, so a
/// test can make the target give its connection back meanwhile (the race
/// the fence closes; tests/python/test_transaction_pooling_kill.py).
/// Release builds never read it.
fn debug_kill_delay() {
    #[cfg(debug_assertions)]
    {
        static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
        let delay = DELAY.get_or_init(|| {
            std::env::var("RINGGATE_DEBUG_KILL_DELAY_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(std::time::Duration::from_millis)
        });
        if let Some(d) = delay {
            std::thread::sleep(*d);
        }
    }
}

/// The session that the KILL CONNECTION `stmt` ends for certain, so its
/// client is closed before the KILL is answered: one of the killer's own
/// proxy user (the server kills a thread of the same account), never the
/// killer itself (it gets the server's 1927 first).
fn victim_to_close(
    stmt: &kill::KillStatement,
    user: &str,
    own_id: u32,
    registry: &Registry,
) -> Option<u32> {
    if stmt.target != kill::KillTarget::Connection {
        return None;
    }
    if !is_proxy_id(stmt.id) {
        // A raw backend thread id that a session of the same user last
        // used and holds no connection now (transaction pooling): that
        // session, as its `SELECT CONNECTION_ID()` said.
        if registry.server_checks_owner() {
            return None;
        }
        let (id, target, now) = registry.owner_of_thread(u32::try_from(stmt.id).ok()?, own_id)?;
        return (!now && target.user.as_deref() == Some(user)).then_some(id);
    }
    let id = stmt.id as u32;
    let target = registry.lookup(id)?;
    (id != own_id && target.user.as_deref() == Some(user)).then_some(id)
}

/// What [`processlist_query`] builds from.
pub struct ProcessList<'a> {
    pub full: bool,
    /// The client's statement text: the session's own row shows it.
    pub original: &'a [u8],
    /// (proxy id, backend thread) of the sessions whose ids are mapped.
    pub sessions: &'a [(u32, u32)],
    /// List only those sessions' threads (shared backend identity: every
    /// thread is the same backend user, so the server would show all).
    pub only_these: bool,
    pub mariadb: bool,
    /// The payload must not be longer.
    pub max_len: usize,
}

/// `SHOW [FULL] PROCESSLIST` as a query of `information_schema.PROCESSLIST`
/// with the same columns, whose `Id` is the proxy id of each mapped session
/// (the id KILL takes, the client's `thread_id()`), and whose own row shows
/// the statement as the client sent it. Sessions beyond what fits in
/// `max_len` are left out (with `only_these`, their rows too); `None` if
/// not even the session's own row fits.
pub fn processlist_query(p: &ProcessList) -> Option<Vec<u8>> {
    use std::fmt::Write;
    let mut hex = String::with_capacity(p.original.len() * 2);
    for b in p.original {
        let _ = write!(hex, "{b:02X}");
    }
    let info = if p.full {
        "INFO"
    } else {
        // SHOW PROCESSLIST cuts Info at 100 characters.
        "LEFT(INFO, 100)"
    };
    let progress = if p.mariadb {
        // SHOW PROCESSLIST sends it as a DOUBLE; the table has a DECIMAL.
        ", CAST(PROGRESS AS DOUBLE) AS `Progress`"
    } else {
        ""
    };
    let head = "SELECT ";
    let tail = format!(
        " AS `Id`, USER AS `User`, HOST AS `Host`, DB AS `db`, COMMAND AS `Command`, \
         TIME AS `Time`, STATE AS `State`, \
         IF(ID = CONNECTION_ID(), CAST(X'{hex}' AS CHAR), {info}) AS `Info`{progress} \
         FROM information_schema.PROCESSLIST"
    );
    let (mut case, mut list) = (String::new(), String::new());
    let fixed = 1
        + head.len()
        + "CASE ID ELSE ID END".len()
        + tail.len()
        + " WHERE ID = CONNECTION_ID() OR ID IN ()".len();
    for (proxy_id, thread) in p.sessions {
        let when = format!(" WHEN {thread} THEN {proxy_id}");
        let item = format!("{}{thread}", if list.is_empty() { "" } else { "," });
        if fixed + case.len() + when.len() + list.len() + item.len() > p.max_len {
            break;
        }
        case.push_str(&when);
        list.push_str(&item);
    }
    let id = if case.is_empty() {
        "ID".to_string()
    } else {
        format!("CASE ID{case} ELSE ID END")
    };
    let filter = match (p.only_these, list.is_empty()) {
        (false, _) => String::new(),
        (true, true) => " WHERE ID = CONNECTION_ID()".to_string(),
        (true, false) => format!(" WHERE ID = CONNECTION_ID() OR ID IN ({list})"),
    };
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(format!("{head}{id}{tail}{filter}").as_bytes());
    (payload.len() <= p.max_len).then_some(payload)
}
