use super::*;

fn opts() -> PostgresOptions {
    PostgresOptions::default()
}

#[test]
fn the_tls_settings_are_taken_out_of_a_url() {
    let (rest, p) = split(
        "postgres://u:p%3F@db:5432/x?application_name=a&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
    )
    .unwrap();
    assert_eq!(rest, "postgres://u:p%3F@db:5432/x?application_name=a");
    assert_eq!(p.mode.as_deref(), Some("verify-full"));
    assert_eq!(p.rootcert.as_deref(), Some("/etc/ca.pem"));
    let (rest, p) = split("postgresql://db/x?sslmode=require").unwrap();
    assert_eq!(rest, "postgresql://db/x");
    assert_eq!(p.mode.as_deref(), Some("require"));
    // A `?` in the password is not the query.
    let (rest, p) = split("postgres://u:a?b@db/x").unwrap();
    assert_eq!(rest, "postgres://u:a?b@db/x");
    assert_eq!(p, Params::default());
    let (rest, p) =
        split("host=db  sslmode = 'verify-ca' dbname=x sslrootcert='/a b/c\\'.pem' port=1")
            .unwrap();
    assert_eq!(rest, "host=db dbname=x port=1");
    assert_eq!(p.mode.as_deref(), Some("verify-ca"));
    assert_eq!(p.rootcert.as_deref(), Some("/a b/c'.pem"));
    let e = split("postgres://db/x?sslcert=/c.pem").unwrap_err();
    assert!(e.message().contains("`sslcert`"), "{e}");
    let e = split("host=db sslkey=/k.pem").unwrap_err();
    assert!(e.message().contains("`sslkey`"), "{e}");
}

#[test]
fn loopback_hosts_are_recognised() {
    for yes in [
        "localhost",
        "LOCALHOST.",
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "[::1]",
        "::ffff:127.0.0.1",
    ] {
        assert!(is_loopback_name(yes), "{yes}");
    }
    for no in [
        "db.internal",
        "10.0.0.1",
        "localhost.example",
        "::2",
        "",
        "0.0.0.0",
    ] {
        assert!(!is_loopback_name(no), "{no}");
    }
}

#[test]
fn without_sslmode_plain_text_only_to_loopback() {
    let t = transport("postgres://u@127.0.0.1:5/x", &opts()).unwrap();
    assert_eq!(
        (t.mode, t.explicit, &t.trust),
        (SslMode::Disable, false, &Trust::Plain)
    );
    let t = transport("host=/run/postgresql dbname=x", &opts()).unwrap();
    assert_eq!(t.mode, SslMode::Disable);
    // Not loopback: verify-full (against the system's roots, when there are any).
    match transport("postgres://u@db.internal/x", &opts()) {
        Ok(t) => assert_eq!((t.mode, t.explicit), (SslMode::VerifyFull, false)),
        Err(e) => assert!(e.message().contains("system's root certificates"), "{e}"),
    }
    // `hostaddr` is where it connects.
    let e = transport(
        "host=localhost hostaddr=10.1.2.3 dbname=x sslmode=disable",
        &opts(),
    )
    .unwrap_err();
    assert!(e.message().contains("sslmode=disable"), "{e}");
}

#[test]
fn plain_text_to_another_host_needs_its_name() {
    let url = "postgres://u@db.internal/x?sslmode=disable";
    let e = transport(url, &opts()).unwrap_err();
    assert!(
        e.message().contains("`sslmode=disable`")
            && e.message().contains("`db.internal`")
            && e.message().contains(PLAINTEXT_HOSTS_ENV),
        "{e}"
    );
    let t = transport(url, &opts().plaintext_host("DB.internal")).unwrap();
    assert_eq!((t.mode, t.local), (SslMode::Disable, false));
    assert!(t.to_string().contains(PLAINTEXT_HOSTS_ENV), "{t}");
    // Naming another host opts nothing in.
    assert!(transport(url, &opts().plaintext_host("db.other")).is_err());
}

#[test]
fn weak_and_unknown_modes_are_refused_by_name() {
    for weak in ["prefer", "allow"] {
        let e =
            transport(&format!("postgres://u@127.0.0.1/x?sslmode={weak}"), &opts()).unwrap_err();
        assert!(e.message().contains(&format!("`sslmode={weak}`")), "{e}");
        assert!(e.message().contains("plain text"), "{e}");
    }
    let e = transport("postgres://u@127.0.0.1/x?sslmode=verify_full", &opts()).unwrap_err();
    assert!(e.message().contains("`sslmode=verify_full`"), "{e}");
}

#[test]
fn root_files_and_what_they_go_with() {
    let e = transport(
        "postgres://u@localhost/x?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        &opts(),
    )
    .unwrap_err();
    assert!(
        e.message()
            .contains("`sslrootcert` `/nonexistent/ca.pem` cannot be read"),
        "{e}"
    );
    // A root file without sslmode means verify-full, even to loopback.
    let e = transport(
        "postgres://u@localhost/x?sslrootcert=/nonexistent/ca.pem",
        &opts(),
    )
    .unwrap_err();
    assert!(e.message().contains("sslrootcert"), "{e}");
    let e = transport(
        "postgres://u@localhost/x?sslmode=disable&sslrootcert=/ca.pem",
        &opts(),
    )
    .unwrap_err();
    assert!(e.message().contains("`sslmode=disable`"), "{e}");
    let e = transport(
        "postgres://u@localhost/x?sslmode=require&sslrootcert=system",
        &opts(),
    )
    .unwrap_err();
    assert!(e.message().contains("sslrootcert=system"), "{e}");
    let t = transport("postgres://u@db.internal/x?sslmode=require", &opts()).unwrap();
    assert_eq!(t.trust, Trust::Unverified);
    assert!(t.to_string().contains("not checked"), "{t}");
}

#[test]
fn tls_needs_a_host_name_and_tcp() {
    let e = transport("host=/run/postgresql dbname=x sslmode=require", &opts()).unwrap_err();
    assert!(e.message().contains("Unix socket"), "{e}");
    let e = transport("hostaddr=10.1.2.3 dbname=x sslmode=require", &opts()).unwrap_err();
    assert!(e.message().contains("`host`"), "{e}");
}
