//! A minimal blocking MySQL client over a `TcpStream`, for clients that must misbehave on
//! purpose, cost no more than a socket (the bench's idle scenarios hold 19,000 of them), or
//! bind a chosen source address before connect. It speaks just enough of the protocol:
//! mysql_native_password login (and the answer to an auth switch), COM_QUERY with a text result
//! (classic EOF, no CLIENT_DEPRECATE_EOF), COM_QUIT.

mod login;
mod packet;
mod reply;
mod result;
mod row;

pub use login::*;
pub use packet::*;
pub use reply::*;
pub use result::*;
pub use row::*;
