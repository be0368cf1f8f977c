//! A scripted completion model for rig 0.44: the only stand-in in toolgate-rig's tests and
//! `examples/rig_agent.rs` (which includes this file). Each completion request takes the next
//! scripted turn — text, or tool calls — and is recorded (its advertised tools, its history),
//! so a test can say what the model was shown and what it read. Everything else is rig as
//! published: the agent, its bus, its hooks and its tool dispatch.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rig_core::completion::options::{Mapping, OptionFields, OptionMap};
use rig_core::completion::{Accepts, CompletionRequest, ReplayTarget};
use rig_core::driver::{Exchange, Model, Opened, Opening, Transport};
use rig_core::error::{EncodeError, ProviderError};
use rig_core::message::Api;
use rig_core::operation::{Block, CallFragment, Completion, Finish};
use rig_core::wire::document::{Reassemble, Serves};
use rig_core::wire::{Decoder, Descriptor, Flow, Mode, Out, Wire, WireEvent};

/// One part of a scripted model turn.
#[derive(Debug, Clone)]
pub(crate) enum Say {
    /// Answer text.
    Text(String),
    /// A tool call: its id, the tool's name and the arguments.
    Call(String, String, serde_json::Value),
}

/// A tool call the model makes.
pub(crate) fn call(id: &str, tool: &str, args: serde_json::Value) -> Say {
    Say::Call(id.to_owned(), tool.to_owned(), args)
}

/// Text the model says.
pub(crate) fn say(text: &str) -> Say {
    Say::Text(text.to_owned())
}

#[derive(Default)]
struct State {
    turns: Mutex<VecDeque<Vec<Say>>>,
    requests: Mutex<Vec<CompletionRequest>>,
}

/// The scripted model's transport: it answers each request with the next turn.
#[derive(Clone, Default)]
pub(crate) struct Scripted {
    state: Arc<State>,
}

/// The scripted model: the wire over its transport.
pub(crate) type ScriptedModel = Model<ScriptWire, Scripted>;

impl Scripted {
    /// A model that answers its requests with `turns`, in order.
    pub(crate) fn model(turns: impl IntoIterator<Item = Vec<Say>>) -> (ScriptedModel, Scripted) {
        let scripted = Scripted::default();
        if let Ok(mut queue) = scripted.state.turns.lock() {
            queue.extend(turns);
        }
        (Model::new(ScriptWire, scripted.clone()), scripted)
    }

    /// Every request the model received, in order.
    pub(crate) fn requests(&self) -> Vec<CompletionRequest> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// The tool names each request advertised to the model.
    pub(crate) fn advertised(&self) -> Vec<Vec<String>> {
        self.requests()
            .iter()
            .map(|r| r.tools.iter().map(|t| t.name.to_string()).collect())
            .collect()
    }
}

/// The scripted wire: the payload is the request, a frame the whole scripted turn.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ScriptWire;

/// One scripted turn, as the transport hands it to the decoder.
pub(crate) struct Frame(Vec<Say>);

impl Wire for ScriptWire {
    type Op = Completion;
    type Payload = CompletionRequest;
    type Frame = Frame;
    type Decoder<'id> = Decode<'id>;
    type Reassembler = Document;

    fn describe(&self) -> Descriptor<'_> {
        Descriptor::new("scripted")
            .model(Some("scripted-model"))
            .replay(self)
    }

    fn encode(
        &self,
        request: CompletionRequest,
        _mode: Mode,
    ) -> Result<CompletionRequest, EncodeError> {
        Ok(request)
    }

    fn decoder<'id>(&self) -> Decode<'id> {
        Decode(std::marker::PhantomData)
    }
}

/// How rig shapes the history it sends the scripted model: as it is, every option taken
/// and ignored.
impl ReplayTarget for ScriptWire {
    fn api(&self) -> Api {
        Api::from_static("scripted")
    }

    fn provider(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "scripted-model"
    }

    fn accepts(&self, _model: &str) -> Accepts {
        Accepts::ALL
    }

    fn map_options(&self, _request: &CompletionRequest, fields: OptionFields<'_>) -> OptionMap {
        let OptionFields {
            reasoning,
            cache,
            service_tier,
            verbosity,
            parallel_tool_calls,
            top_p,
            seed,
            stop,
        } = fields;
        let ignored = |set: bool| match set {
            true => Mapping::Omit("the scripted model ignores options"),
            false => Mapping::Nothing,
        };
        OptionMap {
            reasoning: ignored(reasoning.is_some()),
            cache: ignored(cache.is_some()),
            service_tier: ignored(service_tier.is_some()),
            verbosity: ignored(verbosity.is_some()),
            parallel_tool_calls: ignored(parallel_tool_calls.is_some()),
            top_p: ignored(top_p.is_some()),
            seed: ignored(seed.is_some()),
            stop: ignored(!stop.is_empty()),
        }
    }

    fn states_finish_reason(&self) -> bool {
        false
    }
}

/// Writes a scripted turn through rig's completion writer, as a provider's decoder does.
#[derive(Debug, Default)]
pub(crate) struct Decode<'id>(std::marker::PhantomData<fn(&'id ()) -> &'id ()>);

impl<'id> Decoder<'id, Completion, Frame> for Decode<'id> {
    type Event = Frame;

    fn classify(&self, frame: Frame) -> WireEvent<Frame> {
        WireEvent::Known(frame)
    }

    fn decode(
        &mut self,
        frame: Frame,
        mut out: Out<'id, Completion>,
    ) -> Result<Flow, ProviderError> {
        for part in frame.0 {
            match part {
                Say::Text(text) => {
                    out.run(Block::Text, &text)?;
                }
                Say::Call(id, name, args) => {
                    out.end_run()?;
                    let index = out.fresh_index();
                    out.fragment(
                        Some(index),
                        CallFragment {
                            id: Some(&id),
                            name: Some(&name),
                            arguments: None,
                        },
                    )?;
                    out.announce(index, args)?;
                    out.finish(index)?;
                }
            }
        }
        out.end_run()?;
        Ok(out.end(Finish::default()))
    }
}

/// The reply document: the scripted model has none worth keeping.
#[derive(Debug, Default)]
pub(crate) struct Document;

impl Serves<Completion> for Document {}

impl Reassemble<Frame> for Document {
    fn absorb(&mut self, _frame: &Frame) {}

    fn finish(self) -> serde_json::Value {
        serde_json::json!({"scripted": true})
    }
}

impl Transport<ScriptWire> for Scripted {
    fn send(&self, request: CompletionRequest, _exchange: Exchange) -> Opening<Frame> {
        if let Ok(mut requests) = self.state.requests.lock() {
            requests.push(request);
        }
        let next = self.state.turns.lock().ok().and_then(|mut t| t.pop_front());
        match next {
            Some(turn) => Opening::ready(
                Opened::new(futures::stream::iter([Ok(Frame(turn))]))
                    .with_document(serde_json::json!({"scripted": true})),
            ),
            None => Opening::failed(ProviderError::Provider(String::from(
                "the scripted model has no turn left",
            ))),
        }
    }
}
