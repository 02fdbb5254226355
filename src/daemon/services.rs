//! What `eddy run` starts beside the pipeline: the mesh node (`[mesh]`)
//! and the local HTTP API (`[api]`). Both start before any source, so a
//! bad certificate or a taken port stops the run before it reads anything;
//! both stop after the pipeline, the mesh by leaving the cluster so peers
//! mark this node down at once instead of suspecting it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::gossip::{self, ClusterSource};
use super::http::Response;
use super::http::{HttpServer, Limits, Router};
use super::notify::Notifier;
use super::prometheus::{self, MetricsSource};
use super::reload::ReloadRequest;
use super::status::{StatusSource, routes};
use crate::config::NodeConfig;
use crate::mesh::config::DiscoveryKind;
use crate::mesh::driver::MeshNode;

/// `POST /reload`: reloads the pipeline file as `SIGHUP` does and answers
/// with the outcome once the new pipeline runs (200), or why the old one
/// goes on unchanged (422).
fn reload_route(router: Router, reload: flume::Sender<ReloadRequest>) -> Router {
    #[derive(serde::Serialize)]
    struct Outcome {
        reloaded: bool,
        message: String,
    }
    router.route("POST", "/reload", move |_| {
        let reload = reload.clone();
        Box::pin(async move {
            let (reply, outcome) = flume::bounded(1);
            if reload.send_async(ReloadRequest { reply }).await.is_err() {
                return Response::text(503, "the pipeline is stopping");
            }
            match outcome.recv_async().await {
                Ok(Ok(message)) => Response::json(
                    200,
                    &Outcome {
                        reloaded: true,
                        message,
                    },
                ),
                Ok(Err(message)) => Response::json(
                    422,
                    &Outcome {
                        reloaded: false,
                        message,
                    },
                ),
                Err(_) => Response::text(503, "the pipeline is stopping"),
            }
        })
    })
}

/// Time for the goodbye packets to leave before the endpoint closes.
const LEAVE_FLUSH: Duration = Duration::from_millis(150);

pub(crate) struct Services {
    mesh: Option<Arc<MeshNode>>,
    api: Option<HttpServer>,
    source: Arc<StatusSource>,
    metrics: Arc<MetricsSource>,
    /// systemd's notify socket, when run as a `Type=notify` unit.
    notify: Option<Arc<Notifier>>,
    watchdog: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
    /// The controller's gossip and planner (`gossip.rs`), and its thread.
    cluster: Arc<ClusterSource>,
    gossip: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
    /// The running pipeline for `POST /rebalance`.
    rebalance: Arc<super::rebalance::RebalanceSource>,
    /// `[tune]`: the rate history, forecast and optimiser (`GET /tune`).
    tune: Option<super::tune::TuneService>,
    /// Profiling runs peers ask of this node, and answers to its own.
    profile_server: Option<super::tune_remote::Server>,
}

impl Services {
    /// Starts the mesh if `[mesh]` is present, then the API if enabled.
    /// The error says what failed and how to fix it.
    /// `POST /reload` hands its request to `reload`.
    pub(crate) fn start(
        node: &NodeConfig,
        pipeline: &Path,
        reload: flume::Sender<ReloadRequest>,
    ) -> Result<Services, String> {
        crate::trace::set_window_ms(node.trace.window_ms);
        if node.trace.enabled {
            crate::trace::set_enabled(true);
        }
        let mesh = match &node.mesh {
            None => None,
            Some(config) => {
                let name = node.name_given.then_some(node.name.as_str());
                let mesh = MeshNode::start_from_config(config, name)
                    .map_err(|e| format!("cannot start the mesh: {e}"))?;
                let me = mesh.identity();
                let discovery: Vec<String> = config
                    .discovery
                    .iter()
                    .map(|k| match k {
                        DiscoveryKind::Mdns => "mdns".to_string(),
                        DiscoveryKind::Static => format!("static {:?}", config.seeds),
                    })
                    .collect();
                tracing::info!(
                    node = %me.name,
                    cluster = %mesh.endpoint().hello().cluster,
                    listen = %mesh.endpoint().local_addr(),
                    advertise = %me.addr,
                    incarnation = me.incarnation,
                    "mesh started; discovery: {}",
                    discovery.join(", ")
                );
                Some(Arc::new(mesh))
            }
        };
        let name = match &mesh {
            Some(m) => m.identity().name.clone(),
            None => node.name.clone(),
        };
        let cluster = Arc::new(ClusterSource::new(name.clone(), mesh.clone()));
        let metrics = Arc::new(MetricsSource::new(name.clone()));
        metrics.set_cluster(cluster.clone());
        let source = Arc::new(StatusSource {
            node: name,
            pipeline: pipeline.display().to_string(),
            started: Instant::now(),
            mesh: mesh.clone(),
            stopping: AtomicBool::new(false),
        });
        let mut services = Services {
            mesh,
            api: None,
            source: source.clone(),
            metrics: metrics.clone(),
            notify: Notifier::from_env().map(Arc::new),
            watchdog: None,
            cluster: cluster.clone(),
            gossip: None,
            rebalance: Arc::default(),
            tune: None,
            profile_server: None,
        };
        if let Some(mesh) = &services.mesh {
            services.profile_server = Some(super::tune_remote::Server::start(
                mesh.clone(),
                &node.data_dir,
            ));
        }
        if node.tune.enabled {
            match super::tune::TuneService::start(node, pipeline, cluster.clone()) {
                Ok(t) => services.tune = Some(t),
                Err(e) => {
                    services.shutdown_blocking();
                    return Err(e);
                }
            }
        }
        if let Some(t) = &services.tune {
            let tuner = t.shared();
            cluster.set_forecast(Arc::new(move || tuner.forecast_peak()));
        }
        let stop = Arc::new(AtomicBool::new(false));
        match gossip::spawn(cluster.clone(), stop.clone()) {
            Ok(h) => services.gossip = Some((stop, h)),
            Err(e) => tracing::warn!("no cluster view: cannot start its thread: {e}"),
        }
        if let Some(n) = &services.notify {
            let stop = Arc::new(AtomicBool::new(false));
            services.watchdog = n.start_watchdog(stop.clone()).map(|h| (stop, h));
        }
        if node.api.enabled {
            let router = reload_route(
                prometheus::routes(routes(Router::new(), source), metrics),
                reload,
            );
            let router = gossip::routes(router, cluster);
            let router = super::trace::routes(router);
            let router = super::rebalance::routes(router, services.rebalance.clone());
            let router = super::tune::routes(router, services.tune.as_ref().map(|t| t.shared()));
            match HttpServer::bind(node.api.address, router, Limits::default()) {
                Ok(server) => {
                    tracing::info!(address = %server.local_addr(), "local API at http://{}/status", server.local_addr());
                    services.api = Some(server);
                }
                Err(e) if node.api.explicit => {
                    let msg = format!(
                        "cannot serve the local API on {} ([api] address): {e}",
                        node.api.address
                    );
                    services.shutdown_blocking();
                    return Err(msg);
                }
                Err(e) => {
                    // The default port is likely another eddy's on this
                    // host: run without an API rather than not at all.
                    tracing::warn!(
                        "the local API is off: cannot listen on {} ({e}); another eddy may \
                         have it. Set [api] address to serve it elsewhere, or enabled = false",
                        node.api.address
                    );
                }
            }
        }
        Ok(services)
    }

    /// This node's part of a distributed run, when `[mesh] expect_members`
    /// is above 1: waits until the members are alive and computes the bin
    /// assignment. `None` for a run on this node alone.
    pub(crate) fn cluster(
        &self,
        plan: &crate::plan::Plan,
    ) -> Result<Option<crate::exec::Cluster>, String> {
        let (Some(mesh), Some(config)) = (&self.mesh, plan.node.mesh.as_ref()) else {
            return Ok(None);
        };
        match config.expect_members {
            Some(n) if n > 1 => {
                super::distribute::cluster(mesh, plan, n, config.expect_timeout).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The pipeline has started: `/metrics` reads its counters, and
    /// systemd hears that the service is ready.
    pub(crate) fn attach(&self, reporter: crate::exec::Reporter, described: &str) {
        self.cluster.attach(Some(reporter.clone()));
        self.rebalance.attach(Some(reporter.clone()));
        if let Some(t) = &self.tune {
            t.attach(Some(reporter.clone()));
        }
        self.metrics.attach(Some(reporter));
        if let Some(n) = &self.notify {
            n.send(&format!("READY=1\nSTATUS=running: {described}"));
        }
    }

    /// The pipeline is being replaced (a reload): `/metrics` lets go of
    /// it, so its state closes before the new one opens it.
    pub(crate) fn detach(&self) {
        self.metrics.attach(None);
        self.cluster.attach(None);
        self.rebalance.attach(None);
        if let Some(t) = &self.tune {
            t.attach(None);
        }
        if let Some(n) = &self.notify {
            n.send("RELOADING=1\nSTATUS=reloading");
        }
    }

    /// The pipeline is draining: `/health` answers 503 from now on.
    pub(crate) fn set_stopping(&self) {
        if !self.source.stopping.swap(true, Ordering::Relaxed)
            && let Some(n) = &self.notify
        {
            n.send("STOPPING=1\nSTATUS=stopping");
        }
    }

    /// Leaves the mesh (members mark this node down at once), stops the
    /// API, closes the endpoint.
    pub(crate) async fn shutdown(mut self) {
        self.set_stopping();
        // Runs made for peers stop with this node.
        self.profile_server = None;
        if let Some((stop, h)) = self.gossip.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
        if let Some(mesh) = self.mesh.take() {
            mesh.leave().await;
            smol::Timer::after(LEAVE_FLUSH).await;
            mesh.endpoint().close_and_wait(LEAVE_FLUSH).await;
            tracing::info!("left the mesh");
        }
        self.api = None;
        // Stops sampling (its thread ends before the store closes).
        self.tune = None;
        if let Some((stop, h)) = self.watchdog.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
    }

    pub(crate) fn shutdown_blocking(self) {
        smol::block_on(self.shutdown());
    }
}
