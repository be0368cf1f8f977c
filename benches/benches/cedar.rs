//! Engine against Cedar at 200 rules, one criterion group: toolgate's whole decision
//! (`Governance::decide`, every check of R14 plus the tenant policy) and its policy
//! evaluation alone (`Policy::evaluate`), against `cedar-policy` deciding the same 200 rules
//! (see `toolgate_benches::cedar_policies`) with `Authorizer::is_authorized` on a request
//! built once, and with the request built per call from the call's names and JSON input
//! (context conversion, entity ids, `Request::new`) — what a real integration pays.

use std::hint::black_box;
use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityId, EntityTypeName, EntityUid, PolicySet,
    Request,
};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::Value;
use toolgate_benches::{
    AGENT, CALL_SERVER, CALL_TOOL, call_agent, call_input, call_subject, call_tool,
    cedar_context_json, cedar_policies, governance, policy,
};
use toolgate_core::Verdict;
use toolgate_engine::{CallInput, CallView};

const RULES: usize = 200;

/// What a Cedar integration keeps between calls: the parsed type names and action.
struct CedarIds {
    agent: EntityTypeName,
    tool: EntityTypeName,
    action: EntityUid,
}

impl CedarIds {
    fn new() -> Self {
        let parse = |s: &str| EntityTypeName::from_str(s).expect("a valid type name");
        Self {
            agent: parse("Agent"),
            tool: parse("Tool"),
            action: EntityUid::from_type_name_and_id(parse("Action"), EntityId::new("call")),
        }
    }

    /// Builds the request for one call, as an integration must per call.
    fn request(&self, agent: &str, server: &str, tool: &str, input: &Value) -> Request {
        let context =
            Context::from_json_value(cedar_context_json("mcp", server, tool, input), None)
                .expect("the input converts to a Cedar context");
        let resource = format!(
            "{}/{}",
            server.to_ascii_lowercase(),
            tool.to_ascii_lowercase()
        );
        Request::new(
            EntityUid::from_type_name_and_id(self.agent.clone(), EntityId::new(agent)),
            self.action.clone(),
            EntityUid::from_type_name_and_id(self.tool.clone(), EntityId::new(resource)),
            context,
            None,
        )
        .expect("a request without a schema always builds")
    }
}

fn bench(c: &mut Criterion) {
    let gov = governance(RULES);
    let policy = policy(RULES);
    let (tool, agent, input) = (call_tool(), call_agent(), call_input());
    let subject = call_subject();
    let view = CallView {
        tool: &tool,
        agent: &agent,
        input: CallInput::Value(&input),
        run: Default::default(),
    };

    let policies = PolicySet::from_str(&cedar_policies(RULES)).expect("the Cedar policies parse");
    let entities = Entities::empty();
    let authorizer = Authorizer::new();
    let ids = CedarIds::new();
    let request = ids.request(AGENT, CALL_SERVER, CALL_TOOL, &input);

    // Both engines take the allow path on this call.
    assert_eq!(
        gov.decide(view).verdict,
        Verdict::Run {
            auto_approved: false
        }
    );
    assert_eq!(policy.evaluate(&subject, &input).effect, None);
    let response = authorizer.is_authorized(&request, &policies, &entities);
    assert_eq!(response.decision(), Decision::Allow);
    assert!(response.diagnostics().errors().next().is_none());

    let mut group = c.benchmark_group("engine_vs_cedar_200_rules");
    group.bench_function("toolgate_decide", |b| {
        b.iter(|| black_box(&gov).decide(black_box(view)))
    });
    group.bench_function("toolgate_policy_evaluate", |b| {
        b.iter(|| black_box(&policy).evaluate(black_box(&subject), black_box(&input)))
    });
    group.bench_function("cedar_is_authorized", |b| {
        b.iter(|| {
            authorizer
                .is_authorized(black_box(&request), black_box(&policies), &entities)
                .decision()
        })
    });
    group.bench_function("cedar_build_request_and_authorize", |b| {
        b.iter(|| {
            let request = ids.request(
                black_box(AGENT),
                black_box(CALL_SERVER),
                black_box(CALL_TOOL),
                black_box(&input),
            );
            authorizer
                .is_authorized(&request, black_box(&policies), &entities)
                .decision()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
