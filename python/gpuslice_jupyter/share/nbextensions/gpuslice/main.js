// gpuslice banner for the classic notebook: polls <base_url>gpuslice/status (not counted as
// activity), and when gpuslice warns that the slice will be stopped (idle reclaim or time
// limit) shows a banner with the countdown, saves the notebook once, and offers "Keep my
// session", which reports activity to gpuslice.
define(['jquery', 'base/js/namespace', 'base/js/utils'], function ($, Jupyter, utils) {
  'use strict';
  var base = utils.get_body_data('baseUrl') || '/';
  var state = { deadline: null, onDemand: false, warning: '', savedFor: '', timer: null, poll: 15 };

  function banner() {
    var b = $('#gpuslice-banner');
    if (b.length) return b;
    b = $('<div id="gpuslice-banner" role="alert"/>').css({
      // At the bottom of the window: the notebook's menus stay usable, and its end space
      // (blank room below the last cell) is what it covers.
      position: 'fixed', bottom: 0, left: 0, right: 0, 'z-index': 10000, padding: '8px 16px',
      background: '#fff3cd', color: '#664d03', 'border-top': '2px solid #ffb000',
      'font-size': '14px', display: 'none'
    });
    b.append($('<span id="gpuslice-text"/>'));
    b.append(' ');
    b.append($('<strong id="gpuslice-countdown"/>'));
    b.append(' ');
    b.append($('<button id="gpuslice-keep" class="btn btn-xs btn-warning"/>')
      .text('Keep my session').on('click', keep));
    b.append(' ');
    b.append($('<span id="gpuslice-note"/>'));
    $('body').append(b);
    return b;
  }

  function fmt(sec) {
    sec = Math.max(0, Math.round(sec));
    var m = Math.floor(sec / 60), s = sec % 60;
    return m + ':' + (s < 10 ? '0' : '') + s;
  }

  function tick() {
    if (state.onDemand) {
      // Past its grace in an on-demand queue: no clock runs, it goes when a waiting job needs
      // the room (the daemon's idle_state "reclaimable").
      $('#gpuslice-countdown').text('Stopped as soon as another job needs the room.');
      return;
    }
    if (state.deadline === null) return;
    var left = (state.deadline - Date.now() * 1000) / 1e6;
    $('#gpuslice-countdown').text(left > 0 ? 'Stopping in ' + fmt(left) + '.' : 'Stopping now.');
  }

  function show(job) {
    var b = banner();
    $('#gpuslice-text').text('gpuslice: ' + job.warning +
      '. When the slice is stopped, the kernel state (variables, loaded models) is lost; ' +
      'your files stay.');
    state.deadline = job.warn_deadline_us || null;
    state.onDemand = job.idle_state === 'reclaimable';
    tick();
    if (!state.timer) state.timer = setInterval(tick, 1000);
    b.show();
    // Save once per warning: the open notebook's edits reach the disk before the stop.
    if (state.savedFor !== job.warning && Jupyter.notebook) {
      state.savedFor = job.warning;
      save();
    }
  }

  // Saves the open notebook like Notebook.save_notebook, but with ?no_track_activity=1: a save
  // the banner makes is not the user's activity, so it must not postpone the reclaim it warns
  // of (a tracked save would count as use, and every warned session would be kept).
  function save() {
    var nb = Jupyter.notebook;
    if (!nb._fully_loaded || !nb.writable) return;
    var start = new Date().getTime();
    var model = { type: 'notebook', content: nb.toJSON() };
    utils.ajax(nb.contents.api_url(nb.notebook_path) + '?no_track_activity=1', {
      type: 'PUT', dataType: 'json', contentType: 'application/json', data: JSON.stringify(model)
    }).then(function (data) {
      nb.save_notebook_success(start, data);
      $('#gpuslice-note').text('Notebook saved.');
    }, function (xhr) {
      $('#gpuslice-note').text('Saving the notebook failed (' + ((xhr && xhr.status) || '?') +
        '): save it yourself.');
    });
  }

  function hide() {
    state.deadline = null;
    state.onDemand = false;
    if (state.timer) { clearInterval(state.timer); state.timer = null; }
    $('#gpuslice-banner').hide();
  }

  function keep() {
    $('#gpuslice-note').text('Reporting activity...');
    utils.ajax(utils.url_path_join(base, 'gpuslice/keep'), {
      type: 'POST', dataType: 'json', contentType: 'application/json', data: '{}'
    }).then(function () {
      $('#gpuslice-note').text('Activity reported: the session is kept while you use it.');
      setTimeout(poll, 1000);
    }, function (xhr) {
      var msg = (xhr && xhr.responseJSON && (xhr.responseJSON.error || xhr.responseJSON.message)) ||
        (xhr && xhr.statusText) || 'failed';
      $('#gpuslice-note').text('Could not report activity: ' + msg);
    });
  }

  function poll() {
    utils.ajax(utils.url_path_join(base, 'gpuslice/status'), { type: 'GET', dataType: 'json' })
      .then(function (s) {
        if (s && s.poll_seconds) state.poll = s.poll_seconds;
        var job = s && s.job;
        if (job && job.warning && (job.state === 'running' || job.state === 'stopping')) show(job);
        else hide();
      }, function () { /* server going away: keep what is shown */ });
  }

  function load_ipython_extension() {
    poll();
    (function loop() { setTimeout(function () { poll(); loop(); }, state.poll * 1000); })();
  }

  return { load_ipython_extension: load_ipython_extension };
});
