//! How ringgate presents itself in the greeting it sends clients: as the
//! kind of server its backend is. A MariaDB backend clears CLIENT_MYSQL
//! (bit 0) and announces extended capabilities; clients that know MariaDB
//! (Connector/C and the mariadb CLI, the MariaDB Node and Java connectors)
//! read that as "MariaDB" and ask for those features. Presenting as MySQL in
//! front of MariaDB would hide them: no JSON / UUID type names in column
//! definitions, no progress reports, no bulk execution.

use wire::constants::{CLIENT_MYSQL, MIRRORED_EXT_CAPS};

/// The capability word and MariaDB extended capabilities of the greeting.
///
/// `offered` is what ringgate offers whatever the backend (its own and the
/// pass-through bits, with CLIENT_LONG_PASSWORD set as MySQL servers do);
/// `backend_caps` / `backend_ext` are the backend greeting's, `None` until
/// one has been seen. Until then, and in front of MySQL, the greeting is
/// MySQL-shaped: CLIENT_MYSQL set and no extended capabilities, which every
/// client handles. In front of MariaDB, CLIENT_MYSQL is clear and the
/// extended capabilities are the backend's, limited to those the response
/// tracker follows ([`MIRRORED_EXT_CAPS`]).
pub fn greeting_capabilities(
    offered: u32,
    backend_caps: Option<u32>,
    backend_ext: u32,
) -> (u32, u32) {
    match backend_caps {
        Some(caps) if caps & CLIENT_MYSQL == 0 => {
            (offered & !CLIENT_MYSQL, backend_ext & MIRRORED_EXT_CAPS)
        }
        _ => (offered | CLIENT_MYSQL, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::constants::*;

    /// The capability word and extended capabilities a MariaDB 10.11.19
    /// sandbox sends in its greeting (checked with a raw client).
    const MARIADB_1011_CAPS: u32 = 0x81FF_F7FE;
    const MARIADB_1011_EXT: u32 = 0x1d;

    #[test]
    fn in_front_of_mariadb_the_greeting_is_mariadb_shaped() {
        let offered = CLIENT_LONG_PASSWORD | CLIENT_PROTOCOL_41 | CLIENT_DEPRECATE_EOF;
        let (caps, ext) = greeting_capabilities(offered, Some(MARIADB_1011_CAPS), MARIADB_1011_EXT);
        assert_eq!(caps, CLIENT_PROTOCOL_41 | CLIENT_DEPRECATE_EOF);
        assert_eq!(
            ext,
            MARIADB_CLIENT_PROGRESS
                | MARIADB_CLIENT_STMT_BULK_OPERATIONS
                | MARIADB_CLIENT_EXTENDED_METADATA
                | MARIADB_CLIENT_CACHE_METADATA
        );
    }

    #[test]
    fn unfollowed_extended_capabilities_are_not_offered() {
        // A newer MariaDB offering BULK_UNIT_RESULTS (11.5) and the old COM_MULTI.
        let all = MIRRORED_EXT_CAPS | MARIADB_CLIENT_COM_MULTI | MARIADB_CLIENT_BULK_UNIT_RESULTS;
        let (_, ext) = greeting_capabilities(CLIENT_PROTOCOL_41, Some(0), all | 1 << 20);
        assert_eq!(ext, MIRRORED_EXT_CAPS);
    }

    #[test]
    fn before_any_backend_and_in_front_of_mysql_the_greeting_is_mysql_shaped() {
        let offered = CLIENT_PROTOCOL_41;
        assert_eq!(
            greeting_capabilities(offered, None, 0x1d),
            (CLIENT_PROTOCOL_41 | CLIENT_MYSQL, 0)
        );
        // MySQL 8 sets bit 0; whatever its reserved bytes held is not read.
        assert_eq!(
            greeting_capabilities(offered, Some(0xDFFF_FFFF), 0x1d),
            (CLIENT_PROTOCOL_41 | CLIENT_MYSQL, 0)
        );
    }
}
