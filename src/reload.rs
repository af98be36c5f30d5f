//! How this node reloads its configuration, whoever asks (SIGHUP, the admin
//! API): from rolter.toml, or — on a control node — from rolter.toml and the
//! database together.

use std::sync::Arc;

use crate::control::node::ControlNode;
use crate::state::{GatewayState, Reloaded};

#[derive(Clone)]
pub enum Reloader {
    File(Arc<GatewayState>),
    Control(Arc<ControlNode>),
}

impl Reloader {
    /// Reloads; on failure the running configuration stays and the reasons
    /// come back one per line.
    pub async fn reload(&self) -> Result<Reloaded, Vec<String>> {
        match self {
            Reloader::File(state) => {
                let state = Arc::clone(state);
                match tokio::task::spawn_blocking(move || state.reload()).await {
                    Ok(result) => result.map_err(|e| e.lines()),
                    Err(e) => Err(vec![format!("reload task failed: {e}")]),
                }
            }
            Reloader::Control(control) => {
                let refreshed = control.refresh(true).await.map_err(|e| vec![e]);
                // A file that does not load never reaches the install, which
                // records the rest.
                if let Err(errors) = &refreshed {
                    control
                        .state()
                        .record_reload("rolter.toml and the database", Err(errors.clone()));
                }
                refreshed
            }
        }
    }

    pub fn control(&self) -> Option<&ControlNode> {
        match self {
            Reloader::Control(control) => Some(control),
            Reloader::File(_) => None,
        }
    }
}
