//! The server side of the tracker: the response rules of the module docs, packet by packet,
//! deciding when each pending command's response is complete.

use crate::constants::*;

use super::*;

impl Tracker {
    /// Bytes the backend sent (all of them are forwarded to the client).
    pub fn on_server_bytes(&mut self, chunk: &[u8]) -> Result<(), TrackError> {
        if self.poisoned {
            return Err(TrackError::Poisoned);
        }
        match self.server_inner(chunk) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.poisoned = true;
                Err(e)
            }
        }
    }

    fn server_inner(&mut self, chunk: &[u8]) -> Result<(), TrackError> {
        let mut pos = 0;
        self.flagged.clear();
        self.server_packet_at = None;
        while pos < chunk.len() || self.server.hdr_len == 4 && self.server.remaining == 0 {
            if self.server.at_logical_start() {
                self.server_packet_at = Some(pos);
                if let Some(c) = self.capture.as_deref_mut() {
                    c.packet_sum = checksum::FNV_OFFSET;
                }
                match self.pending.front() {
                    None => return Err(TrackError::UnexpectedServerData),
                    Some(p) if p.state == RespState::InfileData => {
                        return Err(TrackError::UnexpectedServerData)
                    }
                    // An OK that ends a command may carry session state.
                    Some(p) => {
                        self.server.keep_full = self.capture.is_some()
                            && matches!(
                                p.state,
                                RespState::ResultStart
                                    | RespState::InfileResult
                                    | RespState::Single
                            );
                    }
                }
            }
            let (before, in_payload) = (pos, self.server.hdr_len == 4);
            let step = self.server.step(chunk, &mut pos);
            if let Some(c) = self.capture.as_deref_mut().filter(|c| c.checksums) {
                // Payload bytes only: headers (sequence ids, the split
                // into physical packets) never count.
                if in_payload {
                    c.packet_sum = checksum::fnv(c.packet_sum, &chunk[before..pos]);
                }
            }
            if let Step::LogicalEnd = step {
                self.server_packet_done()?;
            }
        }
        Ok(())
    }

    /// A server logical packet just completed: advance the response at the head of the queue.
    fn server_packet_done(&mut self) -> Result<(), TrackError> {
        let deprecate_eof = self.deprecate_eof;
        let cache_metadata = self.cache_metadata;
        let pkt = self.server.packet();
        let Some(front) = self.pending.front_mut() else {
            return Err(TrackError::UnexpectedServerData);
        };
        if pkt.is_progress() && front.state != RespState::Single {
            return Ok(());
        }
        let command = front.command;
        let malformed = |reason| TrackError::MalformedResponse { command, reason };
        let mut status = None;
        let mut result_rows = None;
        let done = match front.state {
            RespState::InfileResult => {
                if pkt.is_err() {
                    true
                } else if pkt.is_ok() || pkt.is_terminator() {
                    status = pkt.status();
                    end_of_result(&mut front.state, status)
                } else {
                    return Err(malformed("expected OK or ERR after LOCAL INFILE data"));
                }
            }
            RespState::ResultStart => match pkt.first_byte() {
                Some(0xFF) => true,
                Some(0xFB) => {
                    front.state = RespState::InfileData;
                    false
                }
                // OK; a short 0xFE packet here (an EOF instead of a result) is taken as an OK.
                Some(0x00) | Some(0xFE) if pkt.is_ok() || pkt.first_len < 9 => {
                    status = pkt.status();
                    end_of_result(&mut front.state, status)
                }
                _ => match lenenc(pkt.prefix) {
                    // The server skipped the metadata: the definitions' EOF
                    // or the rows come next.
                    Some((n, w)) if n > 0 && cache_metadata && pkt.prefix.get(w) == Some(&0) => {
                        front.state = if deprecate_eof {
                            RespState::Rows
                        } else {
                            RespState::ColumnsEof
                        };
                        false
                    }
                    Some((n, _)) if n > 0 => {
                        front.state = RespState::ColumnDefs { left: n };
                        false
                    }
                    _ => return Err(malformed("bad column count")),
                },
            },
            RespState::ColumnDefs { left } => {
                if pkt.is_err() {
                    true
                } else {
                    front.state = if left > 1 {
                        RespState::ColumnDefs { left: left - 1 }
                    } else if deprecate_eof {
                        RespState::Rows
                    } else {
                        RespState::ColumnsEof
                    };
                    false
                }
            }
            RespState::ColumnsEof => {
                if pkt.is_err() {
                    true
                } else if pkt.is_terminator() {
                    status = pkt.status();
                    let s = status.unwrap_or(0);
                    if front.cursor
                        && s & SERVER_STATUS_CURSOR_EXISTS != 0
                        && s & SERVER_MORE_RESULTS_EXISTS == 0
                    {
                        true
                    } else {
                        front.state = RespState::Rows;
                        false
                    }
                } else {
                    return Err(malformed("expected EOF after column definitions"));
                }
            }
            RespState::Rows => {
                if pkt.is_err() {
                    true
                } else if pkt.is_terminator() {
                    status = pkt.status();
                    // The next result set, if any, counts its own rows.
                    result_rows = Some(std::mem::take(&mut front.rows));
                    end_of_result(&mut front.state, status)
                } else {
                    front.rows += 1;
                    false
                }
            }
            RespState::FetchRows => {
                if pkt.is_terminator() {
                    status = pkt.status();
                    true
                } else {
                    pkt.is_err()
                }
            }
            RespState::InfileData => return Err(TrackError::UnexpectedServerData),
            RespState::PrepareStart => {
                if pkt.is_err() {
                    true
                } else if pkt.is_ok() && pkt.prefix.len() >= 9 {
                    let p = pkt.prefix;
                    let cols = u16::from_le_bytes([p[5], p[6]]);
                    let params = u16::from_le_bytes([p[7], p[8]]);
                    if params > 0 {
                        front.state = RespState::PrepareParams { left: params, cols };
                        false
                    } else {
                        prepare_columns(&mut front.state, cols)
                    }
                } else {
                    return Err(malformed("expected PREPARE_OK or ERR"));
                }
            }
            RespState::PrepareParams { left, cols } => {
                if left > 1 {
                    front.state = RespState::PrepareParams {
                        left: left - 1,
                        cols,
                    };
                    false
                } else if !deprecate_eof {
                    front.state = RespState::PrepareParamsEof { cols };
                    false
                } else {
                    prepare_columns(&mut front.state, cols)
                }
            }
            RespState::PrepareParamsEof { cols } => {
                if !pkt.is_terminator() {
                    return Err(malformed("expected EOF after parameter definitions"));
                }
                status = pkt.status();
                prepare_columns(&mut front.state, cols)
            }
            RespState::PrepareCols { left } => {
                if left > 1 {
                    front.state = RespState::PrepareCols { left: left - 1 };
                    false
                } else if !deprecate_eof {
                    front.state = RespState::PrepareColsEof;
                    false
                } else {
                    true
                }
            }
            RespState::PrepareColsEof => {
                if !pkt.is_terminator() {
                    return Err(malformed("expected EOF after column definitions"));
                }
                status = pkt.status();
                true
            }
            RespState::FieldList => {
                if pkt.is_terminator() {
                    status = pkt.status();
                    true
                } else {
                    pkt.is_err()
                }
            }
            RespState::Single => {
                if pkt.is_ok() || pkt.is_terminator() {
                    status = pkt.status();
                }
                true
            }
        };
        if let Some(c) = self.capture.as_deref_mut().filter(|c| c.checksums) {
            c.answer_sum =
                checksum::fold_packet(c.answer_sum, &pkt, status.is_some(), c.packet_sum);
        }
        if let Some(s) = status {
            self.last_status = s;
            if self.strip.is_some() && s & SERVER_SESSION_STATE_CHANGED != 0 {
                if let Some(at) = self
                    .server_packet_at
                    .filter(|_| self.server.first_len < MAX_PACKET)
                {
                    self.flagged.push(at);
                }
            }
        }
        if done {
            self.pending.pop_front();
            if let Some(c) = self.capture.as_mut() {
                let sum = c
                    .checksums
                    .then(|| std::mem::replace(&mut c.answer_sum, checksum::FNV_OFFSET));
                c.done.push_back(Completed {
                    command,
                    text: c.texts.pop_front().flatten(),
                    err: pkt.is_err(),
                    ok: pkt.ok_counts(),
                    warnings: pkt.warnings().unwrap_or(0),
                    status: self.last_status,
                    state_ok: (pkt.is_ok()
                        && status.is_some_and(|s| s & SERVER_SESSION_STATE_CHANGED != 0)
                        && self.server.full.len() as u64 == self.server.logical_len
                        && !self.server.full.is_empty())
                    .then(|| self.server.full.clone()),
                    rows: result_rows.filter(|_| !pkt.is_err()),
                    checksum: sum,
                });
            }
        }
        Ok(())
    }

    /// Bytes the server sent while no response is owed (`buf`: all of them since the command
    /// boundary). A server that closes an idle connection may first send one ERR packet: MySQL
    /// 8.0.24+ sends 4031 with sequence id 0 when wait_timeout expires, MariaDB tries 1927 with
    /// sequence id 1 after KILL (and usually loses the race with its own shutdown(2)), so any
    /// sequence id is accepted. Anything else is a protocol error. Pure: the connection is
    /// finished either way, so the tracker's state does not change.
    pub fn unsolicited_server_bytes(&self, buf: &[u8]) -> Result<Unsolicited, TrackError> {
        if !self.at_command_boundary() {
            return Err(TrackError::UnexpectedServerData);
        }
        let bad = |what| Err(TrackError::UnsolicitedServerData { what });
        if buf.len() > 4 && buf[4] != 0xFF {
            return bad("a packet that is not an ERR");
        }
        let Some(hdr) = buf.get(..4) else {
            return Ok(Unsolicited::Partial);
        };
        let len = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], 0]) as usize;
        if len < 3 {
            return bad("a truncated ERR packet");
        }
        if len > MAX_UNSOLICITED_ERR {
            return bad("an oversized ERR packet");
        }
        if buf.len() < 4 + len {
            return Ok(Unsolicited::Partial);
        }
        if u16::from_le_bytes([buf[5], buf[6]]) == 0xFFFF {
            return bad("a progress report");
        }
        if buf.len() > 4 + len {
            return bad("bytes after an ERR packet");
        }
        Ok(Unsolicited::Err { len: 4 + len })
    }
}

/// After an OK/terminator: another result follows if MORE_RESULTS_EXISTS is set (the state
/// goes back to [`RespState::ResultStart`]); returns whether the response is complete.
fn end_of_result(state: &mut RespState, status: Option<u16>) -> bool {
    if status.is_some_and(|s| s & SERVER_MORE_RESULTS_EXISTS != 0) {
        *state = RespState::ResultStart;
        false
    } else {
        true
    }
}

/// After the parameter definitions (and their EOF) of a prepare response: column definitions
/// follow if there are any; returns whether the response is complete.
fn prepare_columns(state: &mut RespState, cols: u16) -> bool {
    if cols > 0 {
        *state = RespState::PrepareCols { left: cols };
        false
    } else {
        true
    }
}
