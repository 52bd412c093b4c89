//! remora's own long options for post-copy migration (`--migrate-from HOST:PORT …`).

use super::{err, parse_size, ConfigError};

/// remora's long options for post-copy migration (memcached has none of them).
pub(super) const MIGRATE_OPTS: [&str; 6] = [
    "migrate-from",
    "migrate-secret",
    "migrate-secret-file",
    "migrate-push-rate",
    "migrate-wait",
    "migrate-unit",
];

/// The migration `--migrate-from` and its companions ask for, checked; `None` without
/// `--migrate-from`.
pub(super) fn migrate_options(
    opts: &[(&str, String)],
) -> Result<Option<crate::migrate::MigrateFrom>, ConfigError> {
    let Some((_, from)) = opts.iter().find(|(n, _)| *n == "migrate-from") else {
        if let Some((n, _)) = opts.first() {
            return err(format!("--{n} needs --migrate-from HOST:PORT"));
        }
        return Ok(None);
    };
    if !from.contains(':') {
        return err(format!("--migrate-from {from}: expected HOST:PORT"));
    }
    let mut secret = None;
    for (name, v) in opts {
        let given = match *name {
            "migrate-secret" => v.clone(),
            "migrate-secret-file" => match std::fs::read_to_string(v) {
                Ok(s) => s.trim_end_matches(['\r', '\n']).to_string(),
                Err(e) => return err(format!("--migrate-secret-file {v}: {e}")),
            },
            _ => continue,
        };
        if secret.is_some() {
            return err("give one of --migrate-secret and --migrate-secret-file, once");
        }
        if let Err(why) = crate::migrate::secret::check(&given) {
            return err(format!("--{name}: {why}"));
        }
        secret = Some(given);
    }
    let Some(secret) = secret else {
        return err(format!(
            "--migrate-from {from} needs the secret the source was armed with: \
             --migrate-secret-file FILE (or --migrate-secret S, which other users see in ps)"
        ));
    };
    let mut m = crate::migrate::MigrateFrom::new(from, &secret);
    for (name, v) in opts {
        match *name {
            "migrate-push-rate" => match parse_size(v) {
                Some(0) | None => {
                    return err(format!(
                        "--migrate-push-rate {v}: expected bytes per second (k, m, g allowed)"
                    ))
                }
                Some(r) => m.push_rate = Some(r as u64),
            },
            "migrate-wait" => match v.parse::<u64>() {
                Ok(s) => m.wait = std::time::Duration::from_secs(s),
                Err(_) => return err(format!("--migrate-wait {v}: expected seconds")),
            },
            "migrate-unit" => match parse_size(v) {
                Some(u) if u.is_power_of_two() && (4096..=2 << 20).contains(&u) => m.unit = u,
                _ => return err(format!("--migrate-unit {v}: a power of two from 4k to 2m")),
            },
            _ => {}
        }
    }
    Ok(Some(m))
}
