//! Report routes (docs/ACTIONS.md "Sending cards"): which notification channel gets the report
//! cards of whose jobs (an owner, a team, both, or anyone), and the bar under which a card is
//! not sent. Everyone reads them; admins create and delete them.

use leptos::ev::SubmitEvent;
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api::actions::{self, NewReportRoute};
use crate::api::{self, ApiError};
use crate::components::card::Card;
use crate::components::form::{MessageChannelSelect, TextField};
use crate::components::list::NonEmpty;
use crate::components::status::{ConfirmButton, FieldError, FormError, PollStatus, Saved, show_outcome};
use crate::components::table::{Column, DataTable};
use crate::ctx::{latest_ok, polled, read_once, use_app};
use fleetlens_api::accounts::TeamView as Team;
use fleetlens_api::alerts::ChannelView as Channel;
use fleetlens_core::{ChannelId, ReportRouteId};

/// A number typed in a form: empty means the server's default.
fn opt_number(s: &str) -> Result<Option<f64>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<f64>().map(Some).map_err(|_| format!("“{s}” is not a number"))
}

fn channel_name(channels: &[Channel], id: ChannelId) -> String {
    channels
        .iter()
        .find(|c| c.id == id)
        .map(|c| format!("{} ({})", c.name, c.kind))
        .unwrap_or_else(|| format!("channel {id}"))
}

#[component]
pub fn ReportRoutes() -> impl IntoView {
    let ctx = use_app();
    let res = polled(actions::report_routes);
    let routes = latest_ok(res);
    let has_data = Signal::derive(move || routes.with(Option::is_some));
    let channels = read_once(|| async { api::channels().await.map(|c| c.channels) });
    let teams = read_once(api::teams);
    let owner = RwSignal::new(String::new());
    let team = RwSignal::new(String::new());
    let channel = RwSignal::new(String::new());
    let min_hours = RwSignal::new(String::new());
    let min_waste = RwSignal::new(String::new());
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let confirm = RwSignal::new(None::<ReportRouteId>);
    let done = move |out: Result<String, ApiError>| {
        show_outcome(error, saved, out);
        res.refetch();
    };
    let local_error = |field: &str, message: String| ApiError::invalid("/api/v1/report-routes", field, message);
    let submit = move |ev: SubmitEvent| {
        ev.prevent_default();
        let (hours, waste) = match (opt_number(&min_hours.get_untracked()), opt_number(&min_waste.get_untracked())) {
            (Ok(h), Ok(w)) => (h, w),
            (Err(m), _) => return done(Err(local_error("min_gpu_hours", m))),
            (_, Err(m)) => return done(Err(local_error("min_waste_pct", m))),
        };
        let Ok(channel_id) = channel.get_untracked().parse::<ChannelId>() else {
            return done(Err(local_error("channel_id", "choose a channel".into())));
        };
        let o = owner.get_untracked().trim().to_string();
        let route = NewReportRoute {
            team_id: team.get_untracked().parse().ok(),
            owner: (!o.is_empty()).then_some(o),
            channel_id,
            min_gpu_hours: hours,
            min_waste_pct: waste,
        };
        spawn_local(async move {
            let out = actions::create_report_route(&route).await.map(|r| {
                format!(
                    "Cards of {} now go to channel {}.",
                    r.route.owner.as_deref().unwrap_or("anyone's jobs"),
                    r.route.channel_id
                )
            });
            if out.is_ok() {
                owner.set(String::new());
            }
            done(out);
        });
    };
    let delete = move |id: ReportRouteId| {
        confirm.set(None);
        spawn_local(
            async move { done(actions::delete_report_route(id).await.map(|()| "Report route deleted.".into())) },
        );
    };
    let route_list = Signal::derive(move || routes.get().unwrap_or_default());

    view! {
        <Card title_id="routes-title" title="Report routes">
            <p class="muted">
                "When a job ends, its report card goes to the channel of the most specific matching route (owner and team, owner, team, then anyone), once, and only if the job had at least the route's GPU-hours and wasted at least its share."
            </p>
            <PollStatus res has_data/>
            <NonEmpty items=route_list empty="No report route: cards are computed but sent nowhere." let:list>{
                let admin = ctx.is_admin();
                let (chs, tms): (Vec<Channel>, Vec<Team>) = (channels.get(), teams.get());
                view! {
                    <DataTable
                        class="route-table"
                        caption="Report routes"
                        columns={[
                            Column::text("Owner"),
                            Column::text("Team"),
                            Column::text("Channel"),
                            Column::num("At least GPU-hours"),
                            Column::num("At least wasted"),
                            Column::hidden("Actions"),
                        ]}
                    >
                        {list.into_iter().map(|r| {
                            let id = r.id;
                            let who = r.route.owner.clone().unwrap_or_else(|| "anyone".into());
                            let team = r.route.team_id.map(|t| tms.iter().find(|x| x.id == t).map(|x| x.name.clone()).unwrap_or_else(|| format!("team {t}"))).unwrap_or_else(|| "any team".into());
                            let aria_label = format!("Delete the route of {who}");
                            let on_confirm = Callback::new(move |()| delete(id));
                            view! {
                                <tr data-route-id=id.to_string()>
                                    <th scope="row">{who.clone()}</th>
                                    <td>{team}</td>
                                    <td>{channel_name(&chs, r.route.channel_id)}</td>
                                    <td class="num">{crate::format::fx(r.route.min_gpu_hours, 2).to_string()}</td>
                                    <td class="num">{crate::format::pct(r.route.min_waste_pct)}</td>
                                    <td>{admin.then(|| view! {
                                        <ConfirmButton asking=confirm id label="Delete" confirm_label="Confirm delete" aria_label class="btn-quiet btn-danger" on_confirm/>
                                    })}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </DataTable>
                }
            }</NonEmpty>
            <Show when=move || ctx.is_admin()>
                <form class="form-grid" on:submit=submit novalidate aria-label="New report route">
                    <TextField id="route-owner" label="Owner (empty: anyone)" value=owner error field="owner"/>
                    <label for="route-team">
                        <span>"Team"</span>
                        <select id="route-team" on:change=move |ev| team.set(event_target_value(&ev))>
                            <option value="">"Any team"</option>
                            {move || teams.get().into_iter().map(|t| view! { <option value=t.id.to_string()>{t.name.clone()}</option> }).collect_view()}
                        </select>
                    </label>
                    <MessageChannelSelect id="route-channel" label="Channel" none_label="Choose a channel" value=channel channels error field="channel_id"/>
                    <TextField id="route-hours" label="At least GPU-hours (default 0.5)" value=min_hours inputmode="decimal"/>
                    <TextField id="route-waste" label="At least wasted, % (default 20)" value=min_waste inputmode="decimal"/>
                    <button type="submit" class="btn-primary">"Add route"</button>
                </form>
                <FieldError error field="owner" label="Owner"/>
                <FieldError error field="channel_id" label="Channel"/>
                <FieldError error field="min_gpu_hours" label="At least GPU-hours"/>
                <FieldError error field="min_waste_pct" label="At least wasted"/>
            </Show>
            <FormError error fields=&["owner", "channel_id", "min_gpu_hours", "min_waste_pct"]/>
            <Saved saved/>
        </Card>
    }
}

#[cfg(test)]
mod tests {
    use super::opt_number;

    #[test]
    fn empty_numbers_take_the_servers_default() {
        assert_eq!(opt_number("  "), Ok(None));
        assert_eq!(opt_number("0.25"), Ok(Some(0.25)));
        assert!(opt_number("lots").is_err());
    }
}
