//! `toolgate policy`: the tenant policy (and its shadow) stored in the inbox, read and put.

use super::*;

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Print the stored tenant policy with its `updatedAt` (what `put` takes back). A stored
    /// policy that cannot be read is not printed (exit 1): `put` a corrected one.
    Get {
        #[command(flatten)]
        store: StoreArgs,
        /// Print the stored shadow policy instead (R46): decided beside the enforced one on
        /// every call and recorded, never enforced.
        #[arg(long)]
        shadow: bool,
    },
    /// Validate a policy and replace the stored one whole; a refused policy changes nothing.
    Put {
        #[command(flatten)]
        store: StoreArgs,
        /// The policy file (`-` or nothing for standard input).
        file: Option<String>,
        /// Save only if the stored policy's `updatedAt` is STAMP (what `policy get` printed),
        /// or, with `none`, only if no policy is stored; otherwise the put is refused as a
        /// conflict (exit 1) and nothing is saved.
        #[arg(long = "if-updated-at", value_name = "STAMP")]
        if_updated_at: Option<String>,
        /// Store it as the shadow policy (R46), beside the enforced one: decided on every call
        /// and recorded (audit, span, metric), never enforced.
        #[arg(long, conflicts_with = "if_updated_at")]
        shadow: bool,
    },
    /// Remove the stored shadow policy (R46); the enforced policy is untouched.
    ClearShadow {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Replay the calls an audit log recorded (those whose input it holds) under the policy
    /// in force and a proposed one, and print every call that would be decided otherwise,
    /// with the rule that decided each way, and the totals (R46).
    Simulate {
        /// The configuration the calls were decided under (its `policy` is the one in force
        /// unless `--current` names another).
        #[arg(long, value_name = "CONFIG")]
        config: PathBuf,
        /// The audit log (JSON lines, as `audit.file` writes them).
        #[arg(long, value_name = "FILE")]
        audit: PathBuf,
        /// The proposed policy.
        #[arg(long, value_name = "POLICY")]
        policy: PathBuf,
        /// The policy in force, when it is not the configuration's (`toolgate policy get`'s
        /// output, say).
        #[arg(long, value_name = "POLICY")]
        current: Option<PathBuf>,
        /// Print the report as JSON (for CI).
        #[arg(long)]
        json: bool,
    },
}

/// Prints a stored policy's document: pretty, or compact when a number must keep its
/// literal (an integer past 64 bits, R20), so that `put` takes back what `get` prints.
pub(super) fn print_policy(stored: &toolgate_inbox::StoredPolicy) -> Result<(), String> {
    match stored.document_literals().map_err(|e| e.to_string())? {
        Some(text) => println!("{text}"),
        None => print_json(&stored.document().map_err(|e| e.to_string())?),
    }
    Ok(())
}

pub(crate) fn run_policy(command: PolicyCommand) -> Outcome {
    let rt = runtime()?;
    rt.block_on(async move {
        match command {
            // Reads files only: no store.
            PolicyCommand::Simulate {
                config,
                audit,
                policy,
                current,
                json,
            } => crate::policy_sim::run(&config, current.as_deref(), &policy, &audit, json),
            PolicyCommand::Get {
                store,
                shadow: true,
            } => get_shadow(store).await,
            PolicyCommand::ClearShadow { store } => clear_shadow(store).await,
            PolicyCommand::Get {
                store,
                shadow: false,
            } => get(store).await,
            PolicyCommand::Put {
                store,
                file,
                if_updated_at,
                shadow,
            } => put(store, file, if_updated_at, shadow).await,
        }
    })
}

/// `toolgate policy get --shadow`: the stored shadow policy (R46), unless it cannot be read.
async fn get_shadow(store: StoreArgs) -> Outcome {
    let limits = store.limits()?;
    let store = store.open(false).await?;
    match store.get_shadow_policy().await.map_err(|e| e.to_string())? {
        None => {
            eprintln!("toolgate: no shadow policy is stored");
            Ok(ExitCode::from(1))
        }
        Some(stored) => {
            if let Err(errs) = Policy::from_json_str(&stored.body, &limits) {
                eprintln!(
                    "toolgate: the stored shadow policy (updated {}) cannot be read, so it is not printed; put a corrected one with `toolgate policy put --shadow` or remove it with `toolgate policy clear-shadow`:",
                    stored.updated_at
                );
                for e in &errs.errors {
                    eprintln!("error: {e}");
                }
                return Ok(ExitCode::from(1));
            }
            print_policy(&stored)
                .map_err(|e| format!("the stored shadow policy cannot be read: {e}"))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `toolgate policy clear-shadow`.
async fn clear_shadow(store: StoreArgs) -> Outcome {
    let store = store.open(true).await?;
    if store
        .clear_shadow_policy()
        .await
        .map_err(|e| e.to_string())?
    {
        eprintln!("toolgate: the stored shadow policy was removed");
    } else {
        eprintln!("toolgate: no shadow policy was stored");
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolgate policy get`: the stored policy (R22), unless it cannot be read.
async fn get(store: StoreArgs) -> Outcome {
    let limits = store.limits()?;
    let store = store.open(false).await?;
    match store.get_policy().await.map_err(|e| e.to_string())? {
        None => {
            eprintln!("toolgate: no policy is stored; this is the empty policy");
            print_json(&json!({"default": "allow", "rules": []}));
        }
        Some(stored) => {
            // A stored policy that cannot be read is not printed: what `get`
            // prints, `put` must take back (seed 002 answers 409 here).
            if let Err(errs) = Policy::from_json_str(&stored.body, &limits) {
                eprintln!(
                    "toolgate: the stored policy (updated {}) cannot be read, so it is not printed; every mcp and http call is refused `policy_unreadable` until a corrected policy is stored with `toolgate policy put`:",
                    stored.updated_at
                );
                for e in &errs.errors {
                    eprintln!("error: {e}");
                }
                return Ok(ExitCode::from(1));
            }
            print_policy(&stored).map_err(|e| format!("the stored policy cannot be read: {e}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolgate policy put`: replaces the stored (or shadow) policy whole, or refuses it
/// (R22); with `--if-updated-at`, only over the policy it was based on.
async fn put(
    store: StoreArgs,
    file: Option<String>,
    if_updated_at: Option<String>,
    shadow: bool,
) -> Outcome {
    let text = match file.as_deref() {
        None | Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("cannot read the policy from standard input: {e}"))?;
            s
        }
        Some(path) => {
            std::fs::read_to_string(path).map_err(|e| format!("cannot read `{path}`: {e}"))?
        }
    };
    let limits = store.limits()?;
    let store = store.open(true).await?;
    let put = match if_updated_at.as_deref() {
        None if shadow => toolgate_inbox::put_shadow_policy_text(&*store, &text, &limits).await,
        None => put_policy_text(&*store, &text, &limits).await,
        Some(stamp) => {
            let expected = Some(stamp).filter(|s| *s != "none");
            put_policy_text_if_unchanged(&*store, &text, &limits, expected).await
        }
    };
    match put {
        Ok(stored) => {
            print_policy(&stored)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(PutPolicyError::Invalid(errs)) => {
            eprintln!(
                "toolgate: the policy is refused; the stored {}policy is unchanged",
                if shadow { "shadow " } else { "" }
            );
            for e in &errs.errors {
                eprintln!("error: {e}");
            }
            Ok(ExitCode::from(1))
        }
        Err(PutPolicyError::Conflict { expected, stored }) => {
            eprintln!("toolgate: the policy is refused; the stored policy is unchanged");
            eprintln!(
                "error: conflict: `--if-updated-at` is `{}` but the stored policy's updatedAt is `{}`: it was saved since; get it again and redo the change",
                expected.as_deref().unwrap_or("none"),
                stored.as_deref().unwrap_or("none"),
            );
            Ok(ExitCode::from(1))
        }
        Err(PutPolicyError::Store(e)) => Err(e.to_string()),
    }
}
