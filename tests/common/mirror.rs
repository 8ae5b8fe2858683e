//! A loopback mirror whose image and `SHA512SUMS` each test sets (and
//! changes): the mirror the image checks are tested against.

use std::sync::{Arc, Mutex};

/// What the mirror's `SHA512SUMS` answers.
#[derive(Clone)]
pub enum Sums {
    /// The list of the checksum of this content.
    Of(Vec<u8>),
    Status(u16),
}

struct State {
    image: Vec<u8>,
    sums: Sums,
}

/// A loopback mirror serving `state`'s image under `/img/` and its list.
pub struct Mirror {
    pub base: String,
    state: Arc<Mutex<State>>,
}

impl Mirror {
    pub async fn start(image: Vec<u8>, sums: Sums) -> Mirror {
        use axum::extract::Path;
        use axum::http::StatusCode;
        use axum::response::IntoResponse;
        let state = Arc::new(Mutex::new(State { image, sums }));
        let shared = state.clone();
        let app = axum::Router::new().route(
            "/img/{file}",
            axum::routing::get(move |Path(file): Path<String>| {
                let (image, sums) = {
                    let state = shared.lock().unwrap();
                    (state.image.clone(), state.sums.clone())
                };
                async move {
                    if file != "SHA512SUMS" {
                        return image.into_response();
                    }
                    match sums {
                        Sums::Of(content) => super::checksum_list(&file, &content)
                            .unwrap()
                            .into_response(),
                        Sums::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Mirror {
            base: format!("http://{addr}/img"),
            state,
        }
    }

    pub fn set(&self, image: Vec<u8>, sums: Sums) {
        *self.state.lock().unwrap() = State { image, sums };
    }

    pub fn list_url(&self) -> String {
        format!("{}/SHA512SUMS", self.base)
    }
}
