//! The GPUs page: a card per GPU, filters (state, host, model), sorting, and one switch for
//! every card's advanced metrics. Cards are keyed by UUID and read their GPU through a signal,
//! so polling updates numbers in place (focus and open sections survive).

use std::collections::{BTreeSet, HashMap};

use fleetlens_api::GpuSummary;
use fleetlens_core::WorkloadState;
use leptos::Params;
use leptos::prelude::*;
use leptos_router::hooks::use_query;
use leptos_router::params::Params;

use super::gpu_card::{GpuCard, use_prices};
use crate::api;
use crate::components::list::Empty;
use crate::components::status::PollStatus;
use crate::ctx::{Latest, latest_ok, polled, use_app};
use crate::url_state::query_setter;
use crate::{owners, states};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    Efficiency,
    Util,
    Sm,
    Name,
}

impl Sort {
    const ALL: [(Sort, &'static str, &'static str); 4] = [
        (Sort::Efficiency, "efficiency", "Efficiency score (lowest first)"),
        (Sort::Util, "util", "Kernel utilization (highest first)"),
        (Sort::Sm, "sm", "SM activity (lowest first)"),
        (Sort::Name, "name", "Name"),
    ];
    fn key(self) -> &'static str {
        Sort::ALL.iter().find(|(s, _, _)| *s == self).map(|(_, k, _)| *k).unwrap_or("efficiency")
    }
    fn parse(s: &str) -> Sort {
        Sort::ALL.iter().find(|(_, k, _)| *k == s).map(|(s, _, _)| *s).unwrap_or(Sort::Efficiency)
    }
}

/// Cards built in the first frame: more than fill a 1440p window (4 columns × 4 rows of 236 px).
/// The rest follow `CARDS_PER_FRAME` at a time, one step per animation frame, so that a fleet of
/// thousands is on screen and answers input at once instead of after its last card is built.
/// A card takes ~0.6 ms to build on the 2-core benchmark machine (docs/BENCHMARKS.md): a step
/// of 20 stays inside one 60 Hz frame, where a step of 120 held the main thread ~70 ms per frame
/// and delayed every input by as much while the fleet was drawn.
const FIRST_CARDS: usize = 40;
const CARDS_PER_FRAME: usize = 20;

/// The page's view, in the address: `/gpus?state=idle&host=node-1&sort=util&q=alice`.
#[derive(Params, Clone, PartialEq, Default)]
struct GpusQuery {
    state: Option<String>,
    host: Option<String>,
    model: Option<String>,
    sort: Option<String>,
    /// The search box: words that a GPU's UUID, host, model or owners (user, pod, job) contain.
    q: Option<String>,
}

/// Whether every word of `query` (lower-cased) is in the GPU's UUID, host, model or the owners of
/// its processes (user, pod, job).
fn matches_search(g: &GpuSummary, query: &str) -> bool {
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    if words.is_empty() {
        return true;
    }
    let mut hay = format!("{} {} {}", g.info.uuid, g.info.host, g.info.name.as_deref().unwrap_or(""));
    for p in g.latest.as_ref().and_then(|s| s.processes.as_deref()).unwrap_or_default() {
        for o in [owners::user(p), owners::pod(p), owners::job(p)].into_iter().flatten() {
            hay.push(' ');
            hay.push_str(&o);
        }
    }
    let hay = hay.to_lowercase();
    words.iter().all(|w| hay.contains(w.as_str()))
}

fn display_name(g: &GpuSummary) -> String {
    format!("{} {} {:05}", g.info.name.as_deref().unwrap_or(""), g.info.host, g.info.gpu_index.unwrap_or(0))
}

/// Ascending with absent values last.
fn cmp_opt(a: Option<f64>, b: Option<f64>) -> std::cmp::Ordering {
    match (a, b) {
        (Some(a), Some(b)) => a.total_cmp(&b),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    }
}

fn sorted(gpus: Vec<&GpuSummary>, sort: Sort) -> Vec<String> {
    let util = |g: &GpuSummary| g.latest.as_ref().and_then(|s| s.gpu_util_pct);
    let sm = |g: &GpuSummary| g.latest.as_ref().and_then(|s| s.sm_active_pct);
    // Keys computed once per GPU, not once per comparison (a fleet of 1,000 is ~10,000 of them).
    let mut keyed: Vec<(Option<f64>, String, &GpuSummary)> = gpus
        .into_iter()
        .map(|g| {
            let by = match sort {
                Sort::Efficiency => g.efficiency,
                Sort::Util => util(g).map(|v| -v),
                Sort::Sm => sm(g),
                Sort::Name => None,
            };
            (by, display_name(g), g)
        })
        .collect();
    keyed.sort_by(|a, b| cmp_opt(a.0, b.0).then_with(|| a.1.cmp(&b.1)));
    keyed.into_iter().map(|(_, _, g)| g.info.uuid.clone()).collect()
}

#[component]
pub fn GpusPage() -> impl IntoView {
    super::set_title("GPUs");
    let live = use_app().stream;
    let res = polled(move || {
        // A GPU new to the fleet (the live stream): the list at once.
        live.gpus_added.track();
        api::gpus()
    });
    let data = latest_ok(res);
    // The last list, with the states the live stream told since (newer than the list's).
    let gpus = Memo::new(move |_| {
        let mut list = data.with(|d| d.as_ref().map(|l| l.gpus.clone()).unwrap_or_default());
        live.gpus.with(|pushed| {
            for g in &mut list {
                if let Some(p) = pushed.get(&g.info.uuid).filter(|p| p.last_seen_ms >= g.info.last_seen_ms) {
                    g.state = Some(p.state);
                    g.info.last_seen_ms = p.last_seen_ms;
                }
            }
        });
        list
    });
    // Where each GPU sits in the list: a card finds its GPU without scanning the whole fleet.
    let position = Memo::new(move |_| {
        gpus.with(|g| g.iter().enumerate().map(|(i, g)| (g.info.uuid.clone(), i)).collect::<HashMap<String, usize>>())
    });
    let has_data = Signal::derive(move || data.with(Option::is_some));
    let prices = use_prices();

    // The filters live in the address (shareable, Back/Forward); choosing one replaces it.
    let query = use_query::<GpusQuery>();
    let field = move |f: fn(&GpusQuery) -> &Option<String>| {
        Memo::new(move |_| query.with(|q| q.as_ref().ok().and_then(|q| f(q).clone()).unwrap_or_default()))
    };
    let state_f = field(|q| &q.state);
    let host_f = field(|q| &q.host);
    let model_f = field(|q| &q.model);
    let search = field(|q| &q.q);
    let sort_key = field(|q| &q.sort);
    let sort = Memo::new(move |_| Sort::parse(&sort_key.get()));
    let set_query = query_setter();
    let on_select = move |key: &'static str| {
        let set_query = set_query.clone();
        move |ev: leptos::ev::Event| set_query(key, &event_target_value(&ev))
    };
    let expanded = RwSignal::new(BTreeSet::<String>::new());

    let visible = Memo::new(move |_| {
        let (st, h, m, q) = (state_f.get(), host_f.get(), model_f.get(), search.get());
        gpus.with(|gs| {
            let keep: Vec<&GpuSummary> = gs
                .iter()
                .filter(|g| match st.as_str() {
                    "" => true,
                    "none" => g.state.is_none(),
                    s => g.state.is_some_and(|x| Some(x) == WorkloadState::parse(s)),
                })
                .filter(|g| h.is_empty() || g.info.host == h)
                .filter(|g| m.is_empty() || g.info.name.as_deref() == Some(m.as_str()))
                .filter(|g| matches_search(g, &q))
                .collect();
            sorted(keep, sort.get())
        })
    });
    // How many of the visible cards are built so far; a new filter or sort starts from the top.
    let built = RwSignal::new(FIRST_CARDS);
    Effect::new(move |_| {
        state_f.track();
        host_f.track();
        model_f.track();
        search.track();
        sort.track();
        built.set(FIRST_CARDS);
    });
    Effect::new(move |_| {
        if built.get() < visible.with(Vec::len) {
            // `try_`: the page may be gone by the next frame.
            request_animation_frame(move || {
                built.try_update(|n| *n += CARDS_PER_FRAME);
            });
        }
    });
    let hosts = Memo::new(move |_| gpus.with(|g| g.iter().map(|g| g.info.host.clone()).collect::<BTreeSet<_>>()));
    let models =
        Memo::new(move |_| gpus.with(|g| g.iter().filter_map(|g| g.info.name.clone()).collect::<BTreeSet<_>>()));
    let present_states = Memo::new(move |_| {
        gpus.with(|g| {
            let mut v: Vec<String> = WorkloadState::ALL
                .into_iter()
                .filter(|s| g.iter().any(|x| x.state == Some(*s)))
                .map(|s| s.as_str().to_string())
                .collect();
            if g.iter().any(|x| x.state.is_none()) {
                v.push("none".into());
            }
            v
        })
    });
    let all_open = move || {
        let vis = visible.get();
        !vis.is_empty() && expanded.with(|e| vis.iter().all(|u| e.contains(u)))
    };
    let toggle_all = move |_| {
        let open = all_open();
        let vis = visible.get_untracked();
        expanded.update(|e| {
            if open {
                e.clear();
            } else {
                e.extend(vis);
            }
        });
    };

    view! {
        <div class="page-head">
            <h1>"GPUs"</h1>
            <p class="muted" aria-live="polite">
                {move || {
                    let (n, total) = (visible.with(Vec::len), gpus.with(Vec::len));
                    if n == total { format!("{total} GPUs") } else { format!("Showing {n} of {total} GPUs") }
                }}
            </p>
        </div>
        <PollStatus res has_data>
            <form class="toolbar" on:submit=|ev| ev.prevent_default() aria-label="Filter and sort GPUs">
                <label class="search">
                    <span>"Search"</span>
                    <input
                        type="search"
                        placeholder="GPU, host, user, pod, job"
                        prop:value=move || search.get()
                        on:input=on_select("q")
                    />
                </label>
                <label>
                    <span>"State"</span>
                    <select on:change=on_select("state") prop:value=move || state_f.get()>
                        <option value="">"All states"</option>
                        <For each=move || present_states.get() key=|s| s.clone() let:s>
                            <option value=s.clone() selected=state_f.get_untracked() == s>
                                {if s == "none" { "no state yet".to_string() } else { states::name_label(&s) }}
                            </option>
                        </For>
                    </select>
                </label>
                <label>
                    <span>"Host"</span>
                    <select on:change=on_select("host") prop:value=move || host_f.get()>
                        <option value="">"All hosts"</option>
                        <For each=move || hosts.get() key=|s| s.clone() let:h>
                            <option value=h.clone() selected=host_f.get_untracked() == h>{h.clone()}</option>
                        </For>
                    </select>
                </label>
                <label>
                    <span>"Model"</span>
                    <select on:change=on_select("model") prop:value=move || model_f.get()>
                        <option value="">"All models"</option>
                        <For each=move || models.get() key=|s| s.clone() let:m>
                            <option value=m.clone() selected=model_f.get_untracked() == m>{m.clone()}</option>
                        </For>
                    </select>
                </label>
                <label>
                    <span>"Sort by"</span>
                    <select on:change=on_select("sort") prop:value=move || sort.get().key()>
                        {Sort::ALL
                            .iter()
                            .map(|(s, k, label)| view! { <option value=*k selected=sort.get_untracked() == *s>{*label}</option> })
                            .collect_view()}
                    </select>
                </label>
                <button type="button" class="btn-toggle toggle-all" aria-pressed=move || all_open().to_string() on:click=toggle_all>
                    {move || if all_open() { "Hide advanced metrics for all GPUs" } else { "Show advanced metrics for all GPUs" }}
                </button>
            </form>
            {move || gpus.with(Vec::is_empty).then(|| view! {
                <div class="empty card">
                    <h2>"No GPU has reported yet"</h2>
                    <p>"Start an agent on a GPU host: " <code>"fleetlens-agent --server URL --api-key KEY"</code></p>
                </div>
            })}
            {move || (visible.with(Vec::is_empty) && !gpus.with(Vec::is_empty)).then(|| view! {
                <Empty message="No GPU matches these filters."/>
            })}
            <div class="gpu-grid" class:many=move || { visible.with(Vec::len) > FIRST_CARDS }>
                <For each=move || visible.with(|v| v[..built.get().min(v.len())].to_vec()) key=|u| u.clone() let:uuid>
                    {
                        let u = uuid.clone();
                        let gpu: Latest<GpuSummary> = Memo::new(move |_| {
                            let at = position.with(|p| p.get(&u).copied());
                            at.and_then(|i| gpus.with(|g| g.get(i).cloned()))
                        });
                        let u2 = uuid.clone();
                        let open = Signal::derive(move || expanded.with(|e| e.contains(&u2)));
                        let u3 = uuid.clone();
                        let on_toggle = Callback::new(move |_| {
                            expanded.update(|e| {
                                if !e.remove(&u3) {
                                    e.insert(u3.clone());
                                }
                            })
                        });
                        view! { <GpuCard gpu uuid expanded=open on_toggle prices/> }
                    }
                </For>
            </div>
        </PollStatus>
    }
}
