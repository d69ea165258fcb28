//! What the registry is for: a client's KILL (text or COM_PROCESS_KILL)
//! and `SHOW PROCESSLIST`, recognised between commands and rewritten for
//! the backend ([`intercept`]). A KILL of a session names the backend
//! thread that serves it now (fenced until the server answers, see the
//! module docs of `registry.rs`), or is refused as the server would; a KILL
//! the proxy cannot scope to a session is refused; the process list shows
//! proxy ids.

use super::*;
use crate::multiplex::ER_NOT_SUPPORTED_YET;

/// What the session does with a recognised KILL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KillDecision {
    /// Not a connection the proxy maps: the server answers (for an unknown
    /// proxy id that is MariaDB's own 1094, since no backend thread has it).
    Forward,
    /// `payload` goes to the server in place of the KILL: the same KILL of
    /// the backend thread that serves the target session, or (another
    /// proxy user's session, passthrough identity) a block that lets the
    /// server decide from the killer's grants. `own`: a session of the
    /// killer's own proxy user, so the server will carry it out.
    Kill { payload: Vec<u8>, own: bool },
    /// Not the killer's session: ERR 1095 with the id the client used.
    NotOwner { id: u64 },
    /// The target session holds no backend connection (it waits for one):
    /// nothing runs on the server; OK, as for an idle thread (a KILL
    /// CONNECTION then closes its client, see [`Rewrite::close_after_ok`]).
    Nothing,
    /// A KILL the proxy cannot scope to a session of the killer's proxy
    /// user (`KILL USER`, `KILL QUERY ID`, an expression, an executable
    /// comment, a prepared KILL ...): ERR 1235, nothing runs.
    Unmappable,
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
            KillDecision::Unmappable => Some(query(format!(
                "SIGNAL SQLSTATE '42000' SET MYSQL_ERRNO = {ER_NOT_SUPPORTED_YET}, MESSAGE_TEXT = '{}'",
                kill::UNMAPPABLE_MESSAGE
            ))),
        }
    }
}

/// Decide what a KILL from `killer` (a proxy user) does.
///
/// The target is the session the id names: a proxy id's session, or for a
/// raw backend thread id the session that thread serves now (else the one
/// it served last, which holds no connection now: transaction pooling).
/// A session of the killer's own proxy user: its thread is killed. Another
/// user's: with a shared backend identity (every session is the same
/// backend user, so the server cannot tell proxy users apart) 1095; with
/// `server_checks_owner` (each user is itself on the backend) the server
/// decides from the killer's own grants, since two proxy users may be one
/// backend account. An id no session has goes to the server.
pub fn decide_kill(
    stmt: &KillStatement,
    killer: &str,
    registry: &Registry,
    server_checks_owner: bool,
) -> KillDecision {
    plan_kill(stmt, killer, 0, registry, server_checks_owner).decision
}

/// A KILL's decision, the fence on the target's thread while the KILL is
/// on its way to it, and the session whose client to close on an OK.
struct KillPlan {
    decision: KillDecision,
    fence: Option<KillFence>,
    close_after_ok: Option<u32>,
}

/// The session a KILL's id names, as [`decide_kill`] finds it.
struct Found {
    id: u32,
    target: Target,
    fence: Option<KillFence>,
}

fn find_target(id: u64, killer_id: u32, registry: &Registry) -> Option<Found> {
    if is_proxy_id(id) {
        // In range, so it fits.
        let (target, fence) = registry.lookup_fenced(id as u32)?;
        return Some(Found {
            id: id as u32,
            target,
            fence,
        });
    }
    let thread = u32::try_from(id).ok()?;
    if let Some((id, target, fence)) = registry.fence_by_thread(thread, killer_id) {
        return Some(Found {
            id,
            target,
            fence: Some(fence),
        });
    }
    // The session this thread served last holds no connection now (its
    // `SELECT CONNECTION_ID()` named it): the thread may serve anyone by
    // the time a KILL reaches it, so nothing is sent to it. (If that
    // session was leased it again since the scan above, it is not fenced:
    // it too is sent nothing.)
    let (id, mut target, _) = registry.owner_of_thread(thread, killer_id)?;
    target.backend_thread = None;
    Some(Found {
        id,
        target,
        fence: None,
    })
}

/// A KILL of a raw backend thread id that serves no session of this proxy
/// (a connection idle in a pool, one the pool may lease to any session at
/// the instant the KILL arrives, or a connection from outside ringgate).
/// No session is fenced, so only a killer who may kill any thread reaches
/// it: with per-user identity one whose account has CONNECTION ADMIN or
/// SUPER (the block asks the server); with a shared one nobody (1095, or
/// the server's 1094 for a thread that does not exist). A MySQL server has
/// no anonymous blocks, and an id above 32 bits names no thread: the
/// server answers alone.
fn foreign_thread(
    stmt: &KillStatement,
    registry: &Registry,
    server_checks_owner: bool,
) -> KillDecision {
    let Ok(thread) = u32::try_from(stmt.id) else {
        return KillDecision::Forward;
    };
    if is_proxy_id(stmt.id) || !registry.backend_is_mariadb() {
        return KillDecision::Forward;
    }
    let sql = if server_checks_owner {
        stmt.to_privileged_query(Some(thread), stmt.id)
    } else {
        format!(
            "BEGIN NOT ATOMIC IF EXISTS (SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = {thread}) \
             THEN SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = {ER_KILL_DENIED_ERROR}, MESSAGE_TEXT = '{}'; \
             ELSE SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = {}, MESSAGE_TEXT = '{}'; END IF; END",
            kill::not_owner_message(stmt.id),
            kill::ER_NO_SUCH_THREAD,
            kill::unknown_thread_message(stmt.id),
        )
    };
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(sql.as_bytes());
    KillDecision::Kill {
        payload,
        own: false,
    }
}

fn plan_kill(
    stmt: &KillStatement,
    killer: &str,
    killer_id: u32,
    registry: &Registry,
    server_checks_owner: bool,
) -> KillPlan {
    let Some(found) = find_target(stmt.id, killer_id, registry) else {
        // The killer's own thread is its own to kill (KILL CONNECTION of
        // it: the server's 1927, then the close).
        let own = registry.lookup(killer_id).and_then(|t| t.backend_thread);
        let decision = match own {
            Some(t) if u64::from(t) == stmt.id => KillDecision::Forward,
            _ => foreign_thread(stmt, registry, server_checks_owner),
        };
        return KillPlan {
            decision,
            fence: None,
            close_after_ok: None,
        };
    };
    let same_user = found.target.user.as_deref() == Some(killer);
    let query = |sql: String| {
        let mut p = vec![COM_QUERY];
        p.extend_from_slice(sql.as_bytes());
        p
    };
    let decision = match (found.target.backend_thread, same_user) {
        (Some(thread), true) => KillDecision::Kill {
            payload: stmt.to_payload(thread),
            own: true,
        },
        (None, true) => KillDecision::Nothing,
        // A session still logging in has no user: refused, as MariaDB
        // refuses a KILL of an unauthenticated thread.
        (thread, false) if server_checks_owner && registry.backend_is_mariadb() => {
            KillDecision::Kill {
                payload: query(stmt.to_privileged_query(thread, stmt.id)),
                own: false,
            }
        }
        // A MySQL server has no anonymous blocks: it decides alone.
        (Some(thread), false) if server_checks_owner => KillDecision::Kill {
            payload: stmt.to_payload(thread),
            own: false,
        },
        _ => KillDecision::NotOwner { id: stmt.id },
    };
    let sent_to_thread =
        matches!(decision, KillDecision::Kill { .. }) && found.target.backend_thread.is_some();
    // An OK to a KILL CONNECTION means the victim's thread was killed (or,
    // holding none, that the killer may end it): its client is closed
    // before the OK is relayed. Not the killer itself: it gets the
    // server's 1927 first.
    let ends_victim = stmt.target == kill::KillTarget::Connection
        && found.id != killer_id
        && !matches!(decision, KillDecision::NotOwner { .. });
    KillPlan {
        decision,
        fence: found.fence.filter(|_| sent_to_thread),
        close_after_ok: ends_victim.then_some(found.id),
    }
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
    /// The command is the proxy's own in place of a whole KILL (a KILL, a
    /// refusal, `DO 0`, or a block of those): it leaves no session state,
    /// though a block is a compound statement the lexer cannot split.
    pub stateless: bool,
}

/// If `data` (client bytes at a command boundary, nothing owed) starts with
/// a whole KILL, or `SHOW [FULL] PROCESSLIST`, the command to send instead.
/// `None` leaves the bytes to the server, as they are. A command split
/// across reads, or whose rewrite would not fit in `capacity`, is not
/// intercepted: for a KILL of a proxy id the server then answers 1094,
/// never kills the wrong thread.
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
    let mut plan = KillPlan {
        decision: KillDecision::Forward,
        fence: None,
        close_after_ok: None,
    };
    let command = kill::classify_command(pkt.payload);
    let stateless = match &command {
        Some(KillCommand::Mapped(stmt)) => stmt.rest.is_empty(),
        Some(KillCommand::Unmappable) => true,
        _ => false,
    };
    let payload = match command {
        Some(KillCommand::Mapped(stmt)) => {
            plan = plan_kill(&stmt, user, own_id, registry, server_checks_owner);
            debug_kill_delay();
            let mut p = plan.decision.payload()?;
            if !stmt.rest.is_empty() {
                // Statements after the KILL run as the client sent them
                // (every rewrite of a KILL statement is a COM_QUERY).
                p.push(b';');
                p.extend_from_slice(stmt.rest);
            }
            p
        }
        Some(KillCommand::Unmappable) => KillDecision::Unmappable.payload()?,
        Some(KillCommand::OwnConnection) => return None,
        None => {
            let sql = pkt.payload.strip_prefix(&[COM_QUERY])?;
            let full = kill::parse_show_processlist(sql)?;
            processlist_query(&ProcessList {
                full,
                original: sql,
                sessions: &registry.sessions_of(user),
                only_these: !server_checks_owner,
                hide_account_peers: server_checks_owner,
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
        close_after_ok: plan.close_after_ok,
        fence: plan.fence,
        stateless,
    })
}

/// Debug builds: `RINGGATE_DEBUG_KILL_DELAY_MS=N` holds the killer's worker
/// N ms between mapping a KILL to its target's thread and sending it, so a
/// test can make the target give its connection back meanwhile (the race
/// the fence closes; tests/python/test_kill_racing_a_release.py,
/// tests/python/test_kill_scope.py). Release builds never read it.
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
    /// Leave out the threads of the killer's own backend account that are
    /// not its proxy user's sessions, unless the account has PROCESS
    /// (passthrough identity: two proxy users may be one account, whose
    /// threads the server shows to each other).
    pub hide_account_peers: bool,
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
    let peers = if p.hide_account_peers {
        // PROCESSLIST.USER is the user part of USER() for the session's
        // own threads.
        format!(
            " OR USER <> LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1) OR {}",
            kill::account_has("'PROCESS'")
        )
    } else {
        String::new()
    };
    let fixed = 1
        + head.len()
        + "CASE ID ELSE ID END".len()
        + tail.len()
        + " WHERE ID = CONNECTION_ID() OR ID IN ()".len()
        + peers.len();
    let (case, list) = mapped_sessions(p, fixed);
    let id = if case.is_empty() {
        "ID".to_string()
    } else {
        format!("CASE ID{case} ELSE ID END")
    };
    let own = if list.is_empty() {
        "ID = CONNECTION_ID()".to_string()
    } else {
        format!("ID = CONNECTION_ID() OR ID IN ({list})")
    };
    let filter = if p.only_these || p.hide_account_peers {
        format!(" WHERE {own}{peers}")
    } else {
        String::new()
    };
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(format!("{head}{id}{tail}{filter}").as_bytes());
    (payload.len() <= p.max_len).then_some(payload)
}

/// The sessions' `WHEN thread THEN proxy_id` arms and the list of their
/// threads, as many as fit in `p.max_len` beside the query's `fixed` bytes.
fn mapped_sessions(p: &ProcessList, fixed: usize) -> (String, String) {
    let (mut case, mut list) = (String::new(), String::new());
    for (proxy_id, thread) in p.sessions {
        let when = format!(" WHEN {thread} THEN {proxy_id}");
        let item = format!("{}{thread}", if list.is_empty() { "" } else { "," });
        if fixed + case.len() + when.len() + list.len() + item.len() > p.max_len {
            break;
        }
        case.push_str(&when);
        list.push_str(&item);
    }
    (case, list)
}
