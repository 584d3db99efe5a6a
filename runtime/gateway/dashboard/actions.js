// Acting on runs from the page (submit, plan and gate decisions, cancel, replan): a
// placeholder module that does nothing yet; branch 31-actions replaces it. It fills
// #submit (list view) and #actions (run view), and listens to the events app.js sends:
// "plancast:list" after the run list renders, "plancast:run" after each applied batch of a
// run's events (detail: {runId, state}, the run model documented in app.js).
