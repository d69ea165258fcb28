//! Transaction pooling lexes each statement once: the lease (`lease_setup`,
//! before the command runs) and the answer (`on_completed`, after) ask the
//! same text different questions. [`Lexed`] keeps the last text's
//! statements, lexed into vectors reused from one statement to the next, so
//! that a `SELECT 1` costs one lexing and no allocation.

use std::cell::RefCell;
use wire::lexer::{self, LexOptions, Statement, Token};

/// Most bytes of text kept for the comparison between two uses; a longer
/// text is lexed again rather than kept by an idle session.
const KEEP_TEXT: usize = 1024;
/// Most statements kept (their vector's capacity) by an idle session.
const KEEP_STATEMENTS: usize = 8;
/// Most tokens of scratch space a worker thread keeps.
const KEEP_TOKENS: usize = 4096;

thread_local! {
    /// The tokenizer's scratch space: needed only during a lexing, so one
    /// per worker thread rather than one per session.
    static TOKENS: RefCell<Vec<Token>> = const { RefCell::new(Vec::new()) };
}

/// The statements of the last text lexed, and what they were lexed from.
#[derive(Debug, Default)]
pub(super) struct Lexed {
    /// The text (empty with `valid` false: nothing kept).
    sql: Vec<u8>,
    /// The options the text was lexed with.
    opts: LexOptions,
    valid: bool,
    statements: Vec<Statement>,
}

impl Lexed {
    /// The statements of `sql` lexed with `opts`, as `lexer::classify`
    /// would return them: lexed again only when the text or the options
    /// differ from the last call's.
    pub fn get(&mut self, sql: &[u8], opts: &LexOptions) -> &[Statement] {
        let same = self.valid && self.opts == *opts && self.sql == sql;
        if !same {
            TOKENS.with_borrow_mut(|toks| {
                lexer::classify_into(sql, opts, toks, &mut self.statements);
                if toks.capacity() > KEEP_TOKENS {
                    *toks = Vec::new();
                }
            });
            self.sql.clear();
            self.sql.extend_from_slice(sql);
            self.opts = *opts;
            self.valid = true;
        }
        &self.statements
    }

    /// The command has been answered: give back what an idle session
    /// should not hold (a long text's copy, a long statement list). The
    /// next lexing of a short text reuses the rest.
    pub fn trim(&mut self) {
        if self.sql.capacity() > KEEP_TEXT || self.statements.capacity() > KEEP_STATEMENTS {
            *self = Lexed::default();
        }
    }
}

#[cfg(test)]
mod tests;
