//! Reading the server again from an island: answers can come back out of
//! order (a slow refresh after a fast one); only the newest request's
//! answer is shown.

use std::future::Future;

use leptos::prelude::*;

/// Numbers the requests of one view; an answer to an older one is dropped.
#[derive(Clone, Copy)]
pub struct Latest {
    sent: StoredValue<u64>,
}

impl Default for Latest {
    fn default() -> Self {
        Latest {
            sent: StoredValue::new(0),
        }
    }
}

impl Latest {
    /// Runs `request` in the browser; `show` gets its answer unless a newer
    /// request was sent meanwhile.
    pub fn load<T: 'static>(
        self,
        request: impl Future<Output = T> + 'static,
        show: impl FnOnce(T) + 'static,
    ) {
        let mine = self.sent.with_value(|n| n + 1);
        self.sent.set_value(mine);
        leptos::task::spawn_local(async move {
            let answer = request.await;
            if self.sent.try_get_value() == Some(mine) {
                show(answer);
            }
        });
    }
}
