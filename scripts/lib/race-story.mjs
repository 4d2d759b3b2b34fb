// What happened when deploys of one leased schema ran at once, told from what
// each of them reported (its lease events and its result), never from which
// one was expected to win: on a fresh machine either may take the lease first.
// Used by the demo (scripts/demo.mjs) and checked by tests/coordination.test.mjs.

/**
 * `deploys`: `[{ who, events, result }]`, where `events` are the call's
 * `leaseWaiting` and `leaseTaken` events in the order they came, and `result`
 * its `ApplyResult`. Returns one line per deploy, in the order they took the
 * lease.
 */
export function raceStory(deploys) {
  const takenAt = (d) => {
    const i = d.events.findIndex((e) => e.kind === 'leaseTaken');
    return i < 0 ? Infinity : (d.events[i].at ?? i);
  };
  const order = [...deploys].sort((a, b) => takenAt(a) - takenAt(b));
  return order.map((d, place) => {
    const taken = d.events.find((e) => e.kind === 'leaseTaken');
    const waits = d.events.filter((e) => e.kind === 'leaseWaiting');
    const when = place === 0 ? 'first' : 'next';
    const lease = !taken
      ? 'never took the lease'
      : waits.length === 0
        ? `took the lease ${when}, without waiting`
        : `took the lease ${when}, after waiting ${taken.waitedMs} ms while ${waits[0].holder} held it`;
    const did =
      d.result.appliedTo.length > 0
        ? `ran the statements on ${d.result.appliedTo.join(', ')}`
        : d.result.changed
          ? `read the ledger, found the schema on ${d.result.state.podNames.join(', ')}, and ran nothing`
          : 'had nothing to do';
    return `${d.who} ${lease}, then ${did}`;
  });
}
