//! Following a running job from the browser: an `EventSource` on
//! `/api/jobs/:id/events`, resumed after the last event the page has. It is
//! closed when the job ends (else the browser would reconnect) and when the
//! component that opened it goes away.

use pvedeck_domain::types::JobEvent;

/// Closes the stream when dropped.
pub struct Follow {
    source: send_wrapper::SendWrapper<
        std::rc::Rc<std::cell::RefCell<Option<gloo_net::eventsource::futures::EventSource>>>,
    >,
}

impl Drop for Follow {
    fn drop(&mut self) {
        if self.source.valid() {
            self.source.borrow_mut().take();
        }
    }
}

/// Starts following job `id` after event `after`. `on_event` gets each new
/// event, `on_close` the end of the job.
pub fn follow(
    id: u64,
    after: u64,
    on_event: impl Fn(JobEvent) + 'static,
    on_close: impl Fn() + 'static,
) -> Result<Follow, String> {
    use std::cell::RefCell;
    use std::rc::Rc;

    use futures_util::StreamExt;
    use gloo_net::eventsource::futures::EventSource;

    use pvedeck_domain::types::StepEvent;

    enum Item {
        Message(u64, String),
        Close,
        Broken,
    }

    let mut source = EventSource::new(&format!("/api/jobs/{id}/events?after={after}"))
        .map_err(|e| e.to_string())?;
    let messages = source.subscribe("message").map_err(|e| e.to_string())?;
    let closes = source.subscribe("close").map_err(|e| e.to_string())?;
    let shared = Rc::new(RefCell::new(Some(source)));
    let owned = shared.clone();
    let messages = messages.map(|m| match m {
        Ok((_, event)) => Item::Message(
            event.last_event_id().parse().unwrap_or(0),
            event.data().as_string().unwrap_or_default(),
        ),
        Err(_) => Item::Broken,
    });
    let closes = closes.map(|c| if c.is_ok() { Item::Close } else { Item::Broken });
    leptos::task::spawn_local(async move {
        let mut items = futures_util::stream::select(messages, closes);
        while let Some(item) = items.next().await {
            match item {
                Item::Message(seq, data) => {
                    if let Ok(event) = serde_json::from_str::<StepEvent>(&data) {
                        on_event(JobEvent { seq, at: 0, event });
                    }
                }
                Item::Close => {
                    owned.borrow_mut().take();
                    on_close();
                    break;
                }
                Item::Broken => break,
            }
        }
    });
    Ok(Follow {
        source: send_wrapper::SendWrapper::new(shared),
    })
}
