//! The client side of the tracker: commands as the client sends them (and LOCAL INFILE data),
//! deciding what each command expects back and where the proxy must stop forwarding.

use crate::constants::*;

use super::*;

/// Which way the current client logical packet is interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClientPacket {
    Command,
    InfileData,
}

impl Tracker {
    /// Bytes the client sent. `forward` = how many leading bytes of `chunk` the proxy must
    /// forward to the backend. If a `COM_QUIT` or an unsupported command starts inside this
    /// chunk, `forward` stops right before it and `stop` says why; the rest is not looked at.
    /// After a stop every further call returns `forward: 0` and the same `stop`.
    pub fn on_client_bytes(&mut self, chunk: &[u8]) -> Result<ClientChunk, TrackError> {
        if self.poisoned {
            return Err(TrackError::Poisoned);
        }
        if let Some(reason) = self.stopped {
            return Ok(ClientChunk {
                forward: 0,
                stop: Some(reason),
            });
        }
        match self.client_inner(chunk) {
            Ok(c) => Ok(c),
            Err(e) => {
                self.poisoned = true;
                Err(e)
            }
        }
    }

    fn client_inner(&mut self, chunk: &[u8]) -> Result<ClientChunk, TrackError> {
        let mut pos = 0;
        // Offset in this chunk where the current logical packet's header began, if it did.
        let mut packet_start: Option<usize> = None;
        while pos < chunk.len() || self.client.hdr_len == 4 && self.client.remaining == 0 {
            if self.client.at_logical_start() {
                packet_start = Some(pos);
                self.client_kind = match self.pending.front() {
                    Some(p) if p.state == RespState::InfileData => ClientPacket::InfileData,
                    _ => ClientPacket::Command,
                };
            }
            let before = self.client.prefix_len;
            let step_start = pos;
            let in_payload = self.client.hdr_len == 4;
            let start = pos;
            let step = self.client.step(chunk, &mut pos);
            if let Some(c) = self.capture.as_mut() {
                if in_payload && self.client_kind == ClientPacket::Command {
                    let bytes = &chunk[start..pos];
                    if c.current.len() + bytes.len() > c.limit + 1 {
                        c.over = true;
                    } else if !c.over {
                        c.current.extend_from_slice(bytes);
                    }
                }
            }
            if self.client.logical_len > self.max_client_packet {
                return Err(TrackError::PacketTooLarge {
                    len: self.client.logical_len,
                    max: self.max_client_packet,
                });
            }
            if self.client_kind == ClientPacket::Command {
                if let Step::LogicalHeader = step {
                    if self.client.seq != 0 {
                        return Err(TrackError::BadCommandSequence {
                            seq: self.client.seq,
                        });
                    }
                    if self.client.first_len == 0 {
                        return Err(TrackError::EmptyCommand);
                    }
                }
                // First payload byte of a command: decide whether it may be forwarded at all.
                if before == 0 && self.client.prefix_len > 0 {
                    let command = self.client.prefix[0];
                    let stop = match classify(command) {
                        CommandClass::Quit => Some(StopReason::Quit),
                        CommandClass::Unsupported => Some(StopReason::Unsupported { command }),
                        CommandClass::ChangeUser => Some(StopReason::ChangeUser),
                        _ if self.stop_statements && is_statement_command(command) => {
                            if std::mem::take(&mut self.pass_one_statement) {
                                None
                            } else {
                                Some(StopReason::Statement)
                            }
                        }
                        _ => None,
                    };
                    if let Some(reason) = stop {
                        self.stopped = Some(reason);
                        self.stop_dirty = packet_start.is_none();
                        // The command byte is at `step_start`; this chunk's header bytes
                        // are right before it.
                        self.stop_header = Some(StoppedHeader {
                            header: self.client.hdr,
                            in_chunk: match packet_start {
                                Some(_) => 4,
                                None => step_start.min(4),
                            },
                        });
                        return Ok(ClientChunk {
                            forward: packet_start.unwrap_or(0),
                            stop: Some(reason),
                        });
                    }
                }
            }
            if let Step::LogicalEnd = step {
                self.client_packet_done()?;
            }
        }
        Ok(ClientChunk {
            forward: chunk.len(),
            stop: None,
        })
    }

    /// A client logical packet just completed.
    fn client_packet_done(&mut self) -> Result<(), TrackError> {
        match self.client_kind {
            ClientPacket::InfileData => {
                // An empty logical packet ends the file.
                if self.client.first_len == 0 {
                    if let Some(front) = self.pending.front_mut() {
                        front.state = RespState::InfileResult;
                    }
                }
                Ok(())
            }
            ClientPacket::Command => {
                let p = self.client.prefix();
                let Some(&command) = p.first() else {
                    return Err(TrackError::EmptyCommand);
                };
                if command == COM_SET_OPTION {
                    self.set_option_seen = true;
                }
                let text = self.capture.as_mut().map(|c| {
                    let over = std::mem::take(&mut c.over);
                    let mut bytes = std::mem::take(&mut c.current);
                    (!over && !bytes.is_empty()).then(|| {
                        bytes.remove(0);
                        bytes
                    })
                });
                let state = match classify(command) {
                    CommandClass::Result => RespState::ResultStart,
                    CommandClass::Fetch => RespState::FetchRows,
                    CommandClass::Prepare => RespState::PrepareStart,
                    CommandClass::FieldList => RespState::FieldList,
                    CommandClass::Single => RespState::Single,
                    CommandClass::NoResponse => {
                        if let Some(c) = self.capture.as_mut() {
                            c.done.push_back(Completed {
                                command,
                                text: text.flatten(),
                                err: false,
                                ok: None,
                                warnings: 0,
                                status: self.last_status,
                                state_ok: None,
                                rows: None,
                                checksum: None,
                            });
                        }
                        return Ok(());
                    }
                    // Stopped at the first byte; never completes.
                    CommandClass::Quit | CommandClass::Unsupported | CommandClass::ChangeUser => {
                        return Ok(())
                    }
                };
                let cursor = command == COM_STMT_EXECUTE
                    && p.get(5).is_some_and(|f| f & CURSOR_TYPE_MASK != 0);
                if self.pending.len() >= MAX_PENDING {
                    return Err(TrackError::TooManyPending { limit: MAX_PENDING });
                }
                self.pending.push_back(Pending {
                    command,
                    cursor,
                    state,
                    rows: 0,
                });
                if let Some(c) = self.capture.as_mut() {
                    c.texts.push_back(text.flatten());
                }
                Ok(())
            }
        }
    }
}
