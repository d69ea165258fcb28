use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::*;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/testdata/backend_tls")
        .join(name)
}

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

#[test]
fn a_certificate_in_its_window_is_reported_with_its_expiry() {
    let info = check_cert_file(&data("ca.pem"), SystemTime::now()).unwrap();
    assert_eq!(info.count, 1);
    assert_eq!(info.subject, "CN=ringgate test CA");
    assert!(info.first_expiry > SystemTime::now() + 50 * YEAR);
}

#[test]
fn an_expired_or_not_yet_valid_certificate_is_an_error() {
    let later = SystemTime::now() + 200 * YEAR;
    let e = check_cert_file(&data("server.pem"), later).unwrap_err();
    assert!(matches!(e, CertFileError::Expired { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("certificate \"CN=localhost\" expired on 21"),
        "{e}"
    );
    let earlier = SystemTime::now() - YEAR;
    let e = check_cert_file(&data("server.pem"), earlier).unwrap_err();
    assert!(matches!(e, CertFileError::NotYetValid { .. }), "{e:?}");
}

#[test]
fn a_key_must_match_its_certificate() {
    check_key_pair(&data("server.pem"), &data("server.key")).unwrap();
    let e = check_key_pair(&data("server.pem"), &data("other.key")).unwrap_err();
    assert!(matches!(e, CertFileError::KeyMismatch(_)), "{e:?}");
    let e = check_key_pair(&data("server.pem"), &data("nope.key")).unwrap_err();
    assert!(matches!(e, CertFileError::Load(_)), "{e:?}");
    let e = check_cert_file(&data("server.key"), SystemTime::now()).unwrap_err();
    assert!(e.to_string().contains("no certificate"), "{e}");
}
