//! Arbitrary bytes as a CONFIG file (SPEC §7), in JSON and in TOML: loading never panics
//! (every problem is a `ConfigErrors`), and a configuration that loads can be exposed for
//! each agent and decides a call to each of its tools without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate_core::{AgentRef, RunContext, ToolRef};
use toolgate_engine::config::{self, Format};
use toolgate_engine::{CallInput, CallView, Governance};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for format in [Format::Json, Format::Toml] {
        if let Ok(gov) = config::load_str(text, format) {
            exercise(&gov);
        }
    }
});

fn exercise(gov: &Governance) {
    let _ = gov.warnings();
    let agents: Vec<String> = gov.agent_names().map(str::to_owned).collect();
    for agent in agents {
        let Ok(exposure) = gov.expose(&agent) else {
            continue;
        };
        let who = AgentRef::profile(agent.as_str());
        let names = exposure
            .tools
            .iter()
            .map(|t| t.name.to_string())
            .chain(exposure.omitted.iter().map(|t| t.name.to_string()));
        for name in names.take(16) {
            let tool = ToolRef::Name(name);
            for input in [r#"{}"#, r#"{"amount": 100, "customer": {"tier": "free"}}"#] {
                let _ = gov.decide(CallView {
                    tool: &tool,
                    agent: &who,
                    input: CallInput::Text(input),
                    run: RunContext::default(),
                });
            }
        }
    }
}
