// gpuslice banner for the classic notebook: polls <base_url>gpuslice/status (not counted as
// activity) and tells the user, at every moment, where the session stands:
//   warning   gpuslice will stop the server (idle: unless used, with "Keep my session";
//             time limit: at its end) - a countdown; the open notebook is saved at once, for
//             every warning (each has its own deadline), a save that is not activity;
//   kept      "Keep my session" worked: the warning is gone, and when the next one would come;
//   stopping  the deadline has passed: the server is being stopped now;
//   stopped   the server is gone: when, after how long idle (or at its time limit), that the
//             files are kept, and a link back to the hub; in the hub's own words when its home
//             page already says it (GpusliceSpawner's notice), and Jupyter's "dead kernel"
//             dialogs closed, as they would only mislead.
define(['jquery', 'base/js/namespace', 'base/js/utils', 'base/js/events'], function ($, Jupyter, utils, events) {
  'use strict';
  var base = utils.get_body_data('baseUrl') || '/';
  var state = {
    mode: 'none',        // none | warning | kept | stopping | stopped
    job: null,           // the last status's job
    deadline: null,      // µs: the warning's deadline
    kind: 'idle',        // the warning's kind: idle | time-limit
    onDemand: false,
    savedFor: null,      // the deadline of the warning whose save was made
    savedAt: null,       // Date of the last save by the banner
    keptUntil: 0,        // ms: show "kept" until then
    keptFor: null,       // the deadline of the warning that "Keep my session" answered
    idleWindow: null,    // µs: the queue's idle window
    hubHome: null,       // the hub's home page (without a hub: none)
    hubAsked: 0,         // ms: when the hub's home page was last read for its notice
    stoppedAt: null,     // Date the server was found gone
    hubNotice: null,     // the hub's words for it
    failures: 0,         // status polls failed in a row
    timer: null,
    poll: 15
  };

  function banner() {
    var b = $('#gpuslice-banner');
    if (b.length) return b;
    b = $('<div id="gpuslice-banner" role="alert"/>').css({
      // At the bottom of the window: the notebook's menus stay usable, and its end space
      // (blank room below the last cell) is what it covers.
      position: 'fixed', bottom: 0, left: 0, right: 0, 'z-index': 10000, padding: '8px 16px',
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
    b.append(' ');
    b.append($('<a id="gpuslice-home" class="btn btn-xs btn-primary"/>').text('Start it again from the hub').hide());
    $('body').append(b);
    return b;
  }

  var COLOURS = {
    warning: { background: '#fff3cd', color: '#664d03', 'border-top': '2px solid #ffb000' },
    stopping: { background: '#f8d7da', color: '#842029', 'border-top': '2px solid #dc3545' },
    stopped: { background: '#e2e3e5', color: '#1d2330', 'border-top': '2px solid #6c757d' },
    kept: { background: '#d1e7dd', color: '#0f5132', 'border-top': '2px solid #198754' }
  };

  function fmt(sec) {
    sec = Math.max(0, Math.round(sec));
    var m = Math.floor(sec / 60), s = sec % 60;
    return m + ':' + (s < 10 ? '0' : '') + s;
  }

  function words(us) {
    var min = Math.round(us / 60e6);
    if (min < 1) return Math.max(1, Math.round(us / 1e6)) + ' seconds';
    if (min < 120) return min + ' minute' + (min === 1 ? '' : 's');
    return Math.round(min / 60) + ' hours';
  }

  function hhmm(d) { return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }); }

  function savedNote() {
    return state.savedAt ? 'The notebook was saved at ' + state.savedAt.toLocaleTimeString() + '.' : '';
  }

  // Draws the banner for state.mode; called on every status and every second.
  function draw() {
    var b = banner();
    if (state.mode === 'none') { b.hide(); return; }
    b.show();
    b.css(COLOURS[state.mode]);
    b.attr('data-state', state.mode);
    // The states shown so far, in order (tests read it: "stopping" may last a second only).
    var seen = (b.attr('data-seen') || '').split(' ');
    if (seen[seen.length - 1] !== state.mode) b.attr('data-seen', (b.attr('data-seen') ? b.attr('data-seen') + ' ' : '') + state.mode);
    var keepBtn = $('#gpuslice-keep'), home = $('#gpuslice-home');
    keepBtn.toggle(state.mode === 'warning' && state.kind === 'idle');
    home.toggle(state.mode === 'stopped' && !!state.hubHome);
    if (state.hubHome) home.attr('href', state.hubHome);
    var left = state.deadline === null ? null : (state.deadline - Date.now() * 1000) / 1e6;
    if (state.mode === 'warning') {
      if (state.kind === 'time-limit') {
        $('#gpuslice-text').text('gpuslice: this server reaches its time limit and will be stopped. ' +
          'Save your work: the kernel state (variables, loaded models) is lost when it stops; your files stay.');
      } else {
        $('#gpuslice-text').text('gpuslice: ' + (state.job && state.job.warning ? state.job.warning : 'this slice is idle') +
          '. When the slice is stopped, the kernel state (variables, loaded models) is lost; your files stay.');
      }
      $('#gpuslice-countdown').text(state.onDemand ? 'Stopped as soon as another job needs the room.'
                                                   : 'Stopping in ' + fmt(left) + '.');
    } else if (state.mode === 'stopping') {
      $('#gpuslice-text').text('gpuslice is stopping this server now (' +
        (state.kind === 'time-limit' ? 'its time limit is reached' : 'it was not used') +
        '). Your files stay; the kernel state is lost.');
      $('#gpuslice-countdown').text('');
      $('#gpuslice-note').text(savedNote());
    } else if (state.mode === 'kept') {
      $('#gpuslice-text').text('gpuslice: your session is kept.');
      $('#gpuslice-countdown').text('');
      $('#gpuslice-note').text(state.idleWindow
        ? 'It is warned again only after ' + words(state.idleWindow) + ' without use.'
        : 'It is warned again only if it is unused for the idle window again.');
    } else if (state.mode === 'stopped') {
      $('#gpuslice-countdown').text('');
      if (!state.hubNotice) $('#gpuslice-text').text(localStoppedText());
      $('#gpuslice-note').text(savedNote());
      closeJupyterDialogs();
    }
  }

  // What the banner can tell by itself once the server is gone; replaced by the hub's own
  // words when its home page has them.
  function localStoppedText() {
    var j = state.job || {};
    var when = state.deadline && state.deadline <= (state.stoppedAt ? state.stoppedAt.getTime() * 1000 : Infinity)
      ? new Date(state.deadline / 1000) : state.stoppedAt;
    var at = when ? ' at ' + hhmm(when) : '';
    if (state.kind === 'time-limit' && state.deadline) {
      return 'gpuslice stopped this server' + at + ': it reached its time limit. Your files are kept; ' +
        'the kernel state (variables, loaded models) is gone.';
    }
    if (state.deadline && j.idle_since_us) {
      return 'gpuslice stopped this server' + at + ' after it had been idle for ' +
        words(state.deadline - j.idle_since_us) + '. Your files are kept; the kernel state (variables, ' +
        'loaded models) is gone.';
    }
    return 'This notebook server has stopped' + at + '. Your files are kept; the kernel state is gone.';
  }

  // The hub's home page names what happened (GpusliceSpawner's notice), once the hub has seen
  // the end (within its poll interval): read it, as text.
  function askHub() {
    if (!state.hubHome || state.hubNotice || Date.now() - state.hubAsked < 3000) return;
    if (state.stoppedAt && Date.now() - state.stoppedAt.getTime() > 180000) return;  // the hub has no word
    state.hubAsked = Date.now();
    $.ajax({ url: state.hubHome, type: 'GET', dataType: 'html' }).then(function (page) {
      var doc = new DOMParser().parseFromString(page, 'text/html');
      var n = doc.getElementById('gpuslice-notice');
      if (n && state.mode === 'stopped') {
        state.hubNotice = n.textContent.replace(/\s+/g, ' ').trim();
        $('#gpuslice-text').text(state.hubNotice);
      }
    }, function () { /* the hub may be restarting: the local text stays */ });
  }

  // Jupyter's "dead kernel" / "connection failed" dialogs say nothing true about a server
  // gpuslice stopped; the banner says what happened.
  function closeJupyterDialogs() {
    $('.modal.in, .modal:visible').filter(function () { return this.id !== 'gpuslice-banner'; }).modal('hide');
  }

  function tick() {
    if (state.mode === 'warning' && !state.onDemand && state.deadline !== null &&
        state.deadline <= Date.now() * 1000) {
      state.mode = 'stopping';
    }
    if (state.mode === 'kept' && Date.now() > state.keptUntil) state.mode = 'none';
    if (state.mode === 'stopped') askHub();
    draw();
  }

  function startTimer() { if (!state.timer) state.timer = setInterval(tick, 1000); }

  function warned(job) {
    var deadline = job.warn_deadline_us || null;
    // A status read before the keep was counted still shows the kept warning: not a new one.
    if (state.mode === 'kept' && deadline === state.keptFor) return;
    var fresh = state.mode !== 'warning' || state.deadline !== deadline;
    state.job = job;
    state.deadline = deadline;
    state.kind = job.warning_kind === 'time-limit' ? 'time-limit' : 'idle';
    state.onDemand = job.idle_state === 'reclaimable';
    if (state.mode !== 'stopping' || fresh) state.mode = 'warning';
    if (fresh) $('#gpuslice-note').text('');
    // Every warning saves (each has its own deadline): also the one after "Keep my session".
    if (state.savedFor !== deadline && Jupyter.notebook) {
      state.savedFor = deadline;
      save();
    }
    startTimer();
    tick();
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
      state.savedAt = new Date();
      $('#gpuslice-note').text('Notebook saved.');
    }, function (xhr) {
      $('#gpuslice-note').text('Saving the notebook failed (' + ((xhr && xhr.status) || '?') +
        '): save it yourself.');
    });
  }

  function keep() {
    $('#gpuslice-note').text('Reporting activity...');
    utils.ajax(utils.url_path_join(base, 'gpuslice/keep'), {
      type: 'POST', dataType: 'json', contentType: 'application/json', data: '{}'
    }).then(function () {
      state.mode = 'kept';
      state.keptFor = state.deadline;
      state.keptUntil = Date.now() + 15000;
      state.deadline = null;
      draw();
      setTimeout(poll, 1000);
    }, function (xhr) {
      var msg = (xhr && xhr.responseJSON && (xhr.responseJSON.error || xhr.responseJSON.message)) ||
        (xhr && xhr.statusText) || 'failed';
      $('#gpuslice-note').text('Could not report activity: ' + msg);
    });
  }

  function gone() {
    if (state.mode === 'stopped') return;
    if (state.mode === 'warning' && state.deadline !== null && state.deadline <= Date.now() * 1000) {
      state.mode = 'stopping';  // its deadline had passed: it was being stopped
      draw();
    }
    state.mode = 'stopped';
    state.stoppedAt = new Date();
    startTimer();
    tick();
  }

  function poll() {
    utils.ajax(utils.url_path_join(base, 'gpuslice/status'), { type: 'GET', dataType: 'json' })
      .then(function (s) {
        state.failures = 0;
        if (s && s.poll_seconds) state.poll = s.poll_seconds;
        if (s && s.hub_home) state.hubHome = s.hub_home;
        if (s && s.idle_window_us) state.idleWindow = s.idle_window_us;
        var job = s && s.job;
        if (job && job.state === 'stopping') {
          state.job = job;
          if (state.mode !== 'stopped') state.mode = 'stopping';
          startTimer();
          tick();
        } else if (job && job.warning && job.state === 'running') {
          warned(job);
        } else if (state.mode === 'warning' || state.mode === 'stopping') {
          // The warning was withdrawn (the session was used): no banner, nothing stale.
          state.mode = 'none';
          state.deadline = null;
          draw();
        }
      }, function (xhr) {
        // 424 / 503: the hub says the server is not running; 0: nothing answers. Either way
        // a server that was warned or stopping is gone; anything else keeps what is shown.
        var status = xhr ? xhr.status : 0;
        state.failures += 1;
        var down = status === 424 || status === 503 || ((status === 0 || status === 404) && state.failures >= 2);
        if (down && (state.mode === 'warning' || state.mode === 'stopping' || state.job)) gone();
      });
  }

  function load_ipython_extension() {
    // The kernel dying is how the notebook first hears of a stop: ask at once.
    events.on('kernel_dead.Kernel kernel_connection_failed.Kernel kernel_disconnected.Kernel', function () {
      setTimeout(poll, 300);
    });
    poll();
    (function loop() { setTimeout(function () { poll(); loop(); }, (state.mode === 'stopped' ? 5 : state.poll) * 1000); })();
  }

  return { load_ipython_extension: load_ipython_extension };
});
