//! The answer to a text-protocol query the proxy sends itself (the
//! monitor's `SELECT @@read_only, …` and `SHOW ALL SLAVES STATUS`), read
//! one packet at a time into named columns and rows of nullable text.
//!
//! The connection is one that did not negotiate CLIENT_DEPRECATE_EOF (the
//! login capabilities of [`crate::constants::NATIVE_LOGIN_CAPS`]), so the
//! column definitions and the rows each end with a legacy 5-byte EOF.

use crate::constants::{EOF_HEADER, ERR_HEADER, OK_HEADER};
use crate::packet::Reader;
use crate::reply::{parse_err, parse_reply, ServerReply};
use crate::ProtocolError;

/// A legacy EOF is 0xFE, warnings (2), status (2); a row that starts with
/// 0xFE (an 8-byte length) is always longer.
const LEGACY_EOF_LEN: usize = 5;
/// The NULL marker in a text row.
const NULL_CELL: u8 = 0xFB;

/// A whole text result set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl TextResult {
    /// The value of `column` in row `row`: None when the row or the column
    /// is missing or the value is NULL.
    pub fn get(&self, row: usize, column: &str) -> Option<&str> {
        let i = self.columns.iter().position(|c| c == column)?;
        self.rows.get(row)?.get(i)?.as_deref()
    }
}

/// What one packet of the answer completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextStep {
    /// More packets are owed.
    More,
    /// The result set is complete.
    Rows(TextResult),
    /// The statement returned no rows (an OK).
    Ok,
    /// The server refused the statement.
    Err { code: u16, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Columns { left: u64 },
    ColumnsEof,
    Rows,
    Done,
}

/// Reads one answer, packet by packet.
#[derive(Debug)]
pub struct TextResultReader {
    phase: Phase,
    result: TextResult,
}

impl Default for TextResultReader {
    fn default() -> Self {
        Self::new()
    }
}

impl TextResultReader {
    pub fn new() -> Self {
        TextResultReader {
            phase: Phase::Start,
            result: TextResult::default(),
        }
    }

    /// Feeds the next packet's payload.
    pub fn on_packet(&mut self, payload: &[u8]) -> Result<TextStep, ProtocolError> {
        match self.phase {
            Phase::Start => self.first(payload),
            Phase::Columns { left } => {
                self.result.columns.push(column_name(payload)?);
                self.phase = match left - 1 {
                    0 => Phase::ColumnsEof,
                    left => Phase::Columns { left },
                };
                Ok(TextStep::More)
            }
            Phase::ColumnsEof => {
                expect_eof(payload)?;
                self.phase = Phase::Rows;
                Ok(TextStep::More)
            }
            Phase::Rows => self.row(payload),
            Phase::Done => Err(ProtocolError::Malformed {
                what: "text result",
                reason: "a packet after the end",
            }),
        }
    }

    fn first(&mut self, payload: &[u8]) -> Result<TextStep, ProtocolError> {
        match payload.first() {
            Some(&ERR_HEADER) => {
                self.phase = Phase::Done;
                let (code, _, message) = parse_err(payload)?;
                Ok(TextStep::Err { code, message })
            }
            Some(&OK_HEADER) => {
                self.phase = Phase::Done;
                match parse_reply(payload, false)? {
                    ServerReply::Ok { .. } => Ok(TextStep::Ok),
                    _ => Err(ProtocolError::Malformed {
                        what: "text result",
                        reason: "neither OK nor a column count",
                    }),
                }
            }
            _ => {
                let count = Reader::new(payload).lenenc_int("column count")?;
                if count == 0 {
                    return Err(ProtocolError::Malformed {
                        what: "text result",
                        reason: "zero columns",
                    });
                }
                self.phase = Phase::Columns { left: count };
                Ok(TextStep::More)
            }
        }
    }

    fn row(&mut self, payload: &[u8]) -> Result<TextStep, ProtocolError> {
        if payload.first() == Some(&EOF_HEADER) && payload.len() == LEGACY_EOF_LEN {
            self.phase = Phase::Done;
            return Ok(TextStep::Rows(std::mem::take(&mut self.result)));
        }
        if payload.first() == Some(&ERR_HEADER) {
            // An error in the middle of the rows (the statement was killed).
            self.phase = Phase::Done;
            let (code, _, message) = parse_err(payload)?;
            return Ok(TextStep::Err { code, message });
        }
        let mut r = Reader::new(payload);
        let mut cells = Vec::with_capacity(self.result.columns.len());
        while !r.is_empty() {
            if r.peek_u8() == Some(NULL_CELL) {
                r.skip(1, "NULL")?;
                cells.push(None);
                continue;
            }
            let bytes = r.lenenc_bytes("cell")?;
            cells.push(Some(String::from_utf8_lossy(bytes).into_owned()));
        }
        if cells.len() != self.result.columns.len() {
            return Err(ProtocolError::Malformed {
                what: "text row",
                reason: "cell count differs from column count",
            });
        }
        self.result.rows.push(cells);
        Ok(TextStep::More)
    }
}

/// A column definition's name: after catalog, schema, table, org_table.
fn column_name(payload: &[u8]) -> Result<String, ProtocolError> {
    let mut r = Reader::new(payload);
    for what in ["catalog", "schema", "table", "org_table"] {
        r.lenenc_bytes(what)?;
    }
    let name = r.lenenc_bytes("column name")?;
    Ok(String::from_utf8_lossy(name).into_owned())
}

fn expect_eof(payload: &[u8]) -> Result<(), ProtocolError> {
    if payload.first() == Some(&EOF_HEADER) && payload.len() == LEGACY_EOF_LEN {
        return Ok(());
    }
    Err(ProtocolError::Malformed {
        what: "text result",
        reason: "expected the EOF after the column definitions",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::write_lenenc_str;
    use crate::reply::{err_payload, ok_payload};

    fn coldef(name: &str) -> Vec<u8> {
        let mut p = Vec::new();
        for s in ["def", "", "", "", name, ""] {
            write_lenenc_str(&mut p, s.as_bytes());
        }
        p.extend_from_slice(&[0x0c, 33, 0, 0, 1, 0, 0, 0xfd, 0, 0, 0, 0, 0]);
        p
    }

    fn row(cells: &[Option<&str>]) -> Vec<u8> {
        let mut p = Vec::new();
        for c in cells {
            match c {
                Some(s) => write_lenenc_str(&mut p, s.as_bytes()),
                None => p.push(NULL_CELL),
            }
        }
        p
    }

    const EOF: [u8; 5] = [0xFE, 0, 0, 2, 0];

    fn feed(packets: &[Vec<u8>]) -> TextStep {
        let mut r = TextResultReader::new();
        let (last, rest) = packets.split_last().unwrap();
        for p in rest {
            assert_eq!(r.on_packet(p).unwrap(), TextStep::More);
        }
        r.on_packet(last).unwrap()
    }

    #[test]
    fn reads_named_columns_and_null_cells() {
        let step = feed(&[
            vec![2],
            coldef("Slave_IO_Running"),
            coldef("Seconds_Behind_Master"),
            EOF.to_vec(),
            row(&[Some("Yes"), None]),
            row(&[Some("Connecting"), Some("0")]),
            EOF.to_vec(),
        ]);
        let TextStep::Rows(rs) = step else {
            panic!("{step:?}")
        };
        assert_eq!(rs.get(0, "Slave_IO_Running"), Some("Yes"));
        assert_eq!(rs.get(0, "Seconds_Behind_Master"), None);
        assert_eq!(rs.get(1, "Seconds_Behind_Master"), Some("0"));
        assert_eq!(rs.get(2, "Slave_IO_Running"), None);
        assert_eq!(rs.get(0, "No_Such_Column"), None);
    }

    #[test]
    fn no_rows_is_an_empty_result() {
        let step = feed(&[vec![1], coldef("a"), EOF.to_vec(), EOF.to_vec()]);
        assert_eq!(
            step,
            TextStep::Rows(TextResult {
                columns: vec!["a".into()],
                rows: vec![]
            })
        );
    }

    #[test]
    fn errors_and_oks_end_the_answer() {
        let denied = err_payload(1227, "Access denied; you need SLAVE MONITOR");
        assert_eq!(
            feed(&[denied]),
            TextStep::Err {
                code: 1227,
                message: "Access denied; you need SLAVE MONITOR".into()
            }
        );
        assert_eq!(feed(&[ok_payload(0, 0, 2, 0)]), TextStep::Ok);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let mut r = TextResultReader::new();
        assert!(r.on_packet(&[]).is_err());
        let mut r = TextResultReader::new();
        r.on_packet(&[1]).unwrap();
        assert!(r.on_packet(&[0x05, b'x']).is_err());
        let mut r = TextResultReader::new();
        r.on_packet(&[2]).unwrap();
        r.on_packet(&coldef("a")).unwrap();
        r.on_packet(&coldef("b")).unwrap();
        r.on_packet(&EOF).unwrap();
        assert!(r.on_packet(&row(&[Some("1")])).is_err());
    }
}
