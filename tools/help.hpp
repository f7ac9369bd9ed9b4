#pragma once
// The --help pages of the redislock tool (one per subcommand, man-page style).

namespace redislock_cli {

inline const char* main_help() {
  return R"(NAME
    redislock - run commands under a distributed lock on Redis; inspect and break locks

SYNOPSIS
    redislock run [OPTIONS] NAME -- COMMAND [ARGS...]
    redislock elect [OPTIONS] NAME [--value V] -- COMMAND [ARGS...]
    redislock status [OPTIONS] NAME...
    redislock top [OPTIONS] [PREFIX]
    redislock break [OPTIONS] NAME
    redislock help [SUBCOMMAND] | --help | --version

DESCRIPTION
    The locks are the ones of the redislock C++ library, so programs using the library and
    shell scripts using this tool exclude each other on the same NAME.

    run     hold NAME while COMMAND runs (the lease is renewed in the background)
    elect   campaign for leadership of the election NAME, run COMMAND while leading
    status  show who holds NAME, how long its lease lasts, waiters, the last fencing token
            (--watch: refreshed until Ctrl-C)
    top     the busiest names under a prefix: holders, waiters, lease left (SCAN, bounded)
    break   force-release NAME (administrator action)

    "redislock SUBCOMMAND --help" describes each one.

COMMON OPTIONS
    --url URL         the Redis server: redis://[[user]:password@]host[:port][/db] or
                      unix:///path/to.sock[?db=N]; a cluster:
                      redis-cluster://[[user]:password@]host:port[,host:port...]; the master
                      of a Sentinel service: redis-sentinel://[[user]:password@]host[:port]
                      [,host[:port]...]/SERVICE[/db][?sentinel_password=...] (rediss... for
                      TLS). Default: $REDISLOCK_URL, else redis://127.0.0.1:6379. Prefer
                      $REDISLOCK_URL for passwords (the command line is visible in ps).
    --prefix PREFIX   key prefix of the locks (default "redislock:", as in the library)
    --timeout DUR     connect and command timeout (default 1s)

DURATIONS
    A number with a unit: 500ms, 30s, 5m, 1h (fractions allowed: 1.5s). No unit means seconds.

EXIT STATUS
    run, elect
              the command's exit status (128+N when it was killed by signal N), or:
              75 (--conflict-exit-code) the lock was not obtained (--no-wait, --wait ran out)
              76 the lease was lost, or renewals went unconfirmed until it could run out,
                 while the command ran (it was stopped, --on-lost)
              126 COMMAND could not be executed, 127 COMMAND was not found
    status    0 every NAME is held, 1 some NAME is free (or not a lock); with --watch 0
    top       0
    break     0 a hold was removed, 1 NAME was free (nothing removed)
    all       2 bad usage (nothing was sent to Redis), 69 Redis unreachable or it refused
              (wrong password, NAME used by another kind of lock, ...)

EXAMPLES
    redislock run nightly-report -- /usr/local/bin/report --since yesterday
    redislock run --no-wait --lease 5m backup -- ./backup.sh; [ $? -eq 75 ] && echo "backup already running"
    redislock status --json nightly-report backup
    redislock status --watch --interval 2s nightly-report
    redislock top order:
    redislock break --yes nightly-report
)";
}

inline const char* run_help() {
  return R"(NAME
    redislock run - run a command while holding a distributed lock

SYNOPSIS
    redislock run [OPTIONS] NAME -- COMMAND [ARGS...]

DESCRIPTION
    Acquires the lock NAME (an exclusive redislock::mutex; with --shared a read hold, with
    --write the write hold of a redislock::shared_mutex; with --permits N one of the N
    permits of a redislock::semaphore), then runs COMMAND in its own process
    group while the lease is renewed every lease/3. The lock is held until COMMAND and every
    process it started have exited, as flock(1) holds while any process keeps the lock open:
    a process left running in the background keeps the lock, even one that left COMMAND's
    process group or session (setsid), as it stays a descendant of redislock's helper process
    (a child subreaper). Then the lock is released and redislock exits with COMMAND's status
    (128+N when it was killed by signal N). Processes handed to something else to start
    (systemd-run, at, ssh) are not COMMAND's descendants: the lock does not wait for them.

    COMMAND gets in its environment:
      REDISLOCK_NAME            NAME
      REDISLOCK_FENCING_TOKEN   this hold's fencing token: strictly increasing per NAME;
                                pass it to the storage you write so it can reject a late
                                writer (a shared hold gets the latest writer's token)
      REDISLOCK_LEASE_MS        the lease in milliseconds

    SIGINT, SIGTERM and SIGHUP sent to redislock are forwarded to COMMAND's process group,
    each followed by SIGCONT so that a suspended COMMAND acts on it (processes that left the
    group do not get them). redislock itself does not stop: SIGTSTP (Ctrl-Z), SIGTTIN and
    SIGTTOU sent to it suspend COMMAND's process group (SIGSTOP) while redislock runs on and
    keeps renewing the lease, so the lock stays held; SIGCONT sent to redislock resumes
    COMMAND's group. A shell therefore does not see the job as stopped: resume COMMAND with
    "kill -CONT" to redislock's pid, or end it with Ctrl-C. While redislock still waits for
    the lock these signals are ignored. SIGSTOP stops redislock itself (it cannot be caught).
    Interrupted while still waiting for the lock, redislock exits with 128+N. Since COMMAND
    has its own process group it is not the terminal's foreground job: it may write to the
    terminal, but a COMMAND that reads from it is stopped (SIGTTIN); give it input by a pipe
    or a file.

STOPPING COMMAND BEFORE THE LEASE CAN RUN OUT
    Let C be the time, on redislock's monotonic clock, at which it sent the last renewal (or
    the acquisition) that the server confirmed. The server keeps the lock until C + lease
    (a little later: it set the lease on receipt), and then lets it go if no later renewal
    reached it, so a waiting run may start then. Let M, the margin, be 200ms + 0.1% of the
    lease (200ms for the signal's delivery and the processes' exit, 0.1% for a server clock
    that runs faster than redislock's: NTP slews a clock by at most 0.05%). When renewals are
    not confirmed (Redis unreachable or silent, redislock starved of CPU), redislock stops
    COMMAND before C + lease, by --on-lost:
      term    SIGTERM to COMMAND's process group at C + lease - kill-after - M, and
              SIGKILL --kill-after later (at C + lease - M) to that group and to every
              process COMMAND started
      kill    SIGKILL at C + lease - M
      ignore  nothing: COMMAND runs on; a line on stderr once the lease is found lost
    SIGKILL never comes later than C + lease - M. When redislock acts late (it was stopped or
    starved of CPU) and less than --kill-after is left before then, SIGTERM's grace is
    shortened to what is left; when nothing is left, SIGKILL comes at once, without SIGTERM.
    A lease found lost outright (the lock broken by an administrator, or taken) is acted on
    at once, which is at its next renewal (within a third of the lease): SIGTERM, and SIGKILL
    --kill-after later but no later than C + lease - M (kill: SIGKILL at once). Another
    holder may already run then: COMMAND overlaps with it for at most that detection time
    plus the grace, never past where this run's own lease would have ended. Breaking a lock
    is an administrator's choice; where SIGTERM's grace is too long, use --on-lost kill, and
    fence the writes. A line goes to stderr; redislock waits until every process of
    COMMAND's has exited, releases what it still holds, and exits with 76 (with COMMAND's own
    status when COMMAND had ended by itself before it was to be stopped).
    SIGTERM waits until half the lease went unconfirmed (a renewal is due at a third of it,
    and is retried), so with term or kill, --kill-after + M must not exceed half the lease; a
    --kill-after or a --lease that does not fit is refused (exit status 2) before anything is
    sent.
    Not covered: redislock or the whole machine frozen past the deadline (a suspended VM,
    SIGSTOP), a process that takes longer than the margin to die after SIGKILL (uninterruptible
    sleep, such as a hung NFS mount), a Redis server whose clock jumps forward or runs faster
    than by 0.1%, and writes COMMAND sent that are still on their way. Fencing covers all of
    them: pass $REDISLOCK_FENCING_TOKEN to the storage you write, so that it rejects a late
    writer.

    If redislock itself dies (kill -9, a crash), its helper process (between redislock and
    COMMAND; in a process group of its own, blocking every signal but SIGKILL, not
    set-user-ID, without capabilities) sees it at once and SIGKILLs COMMAND's process group
    and every process COMMAND started, set-user-ID commands and commands with file
    capabilities included (the kernel's PR_SET_PDEATHSIG does not survive their exec). The
    lock is not released: its lease runs out, as nothing renews it. If the helper alone is
    killed (it is a fork of redislock, also named redislock: pgrep -n redislock finds it),
    the processes it had come to redislock (a child subreaper too), which SIGKILLs COMMAND's
    process group and every process COMMAND started, waits until none is left (at most 5 s),
    releases the lock and exits with 137 (128 + SIGKILL); if some remain, or redislock could
    not become a child subreaper, it says so and exits without releasing: the lease runs out.
    Not covered: a process that changed its real user ID (su, sudo: redislock's user may not
    signal it, nor do --on-lost and the forwarded signals reach it), and redislock and its
    helper both killed with SIGKILL (then the kernel SIGKILLs COMMAND, unless it is
    set-user-ID or has file capabilities, and nothing reaches the processes COMMAND started).

OPTIONS
    --wait DUR                 give up after waiting DUR for the lock (default: wait forever)
    --no-wait                  give up at once if the lock is held (same as --wait 0)
    --conflict-exit-code N     exit status when the lock was not obtained (default 75)
    --lease DUR                the lease (default 30s): how long the lock outlives a crashed
                               redislock. Renewed every DUR/3 while COMMAND runs. With
                               --on-lost term or kill, at least 400ms
    --shared                   take a read hold of a shared lock (redislock::shared_mutex):
                               any number of --shared runs at once, none with a --write one
    --write                    take the write hold of a shared lock: alone, like the default
                               mutex, but on the same lock as the --shared runs of NAME (a
                               NAME is one kind of lock: mixing a plain run with --shared
                               runs of it fails with exit status 69, "wrong kind")
    --permits N                take one of N permits of a semaphore (redislock::semaphore):
                               at most N runs of NAME at once, each with its own lease and
                               fencing token. N is stored with NAME while anyone holds a
                               permit: a run with another N gets the stored one (N seeds an
                               idle NAME)
    --fair                     fair mode: a lock whose holder's lease ran out goes to the
                               longest waiter (with --shared/--write: the head of the queue),
                               and no run enters past a waiting one (all users of NAME must
                               agree)
    --on-lost term|kill|ignore what to do when the lease is lost or may run out (default
                               term; see STOPPING COMMAND ...):
                               term   SIGTERM to COMMAND's process group, SIGKILL after
                                      --kill-after; exit status 76
                               kill   SIGKILL; exit status 76
                               ignore only the message; COMMAND runs on and its status is
                                      redislock's
    --kill-after DUR           with --on-lost term: SIGKILL this long after SIGTERM; at most
                               half the lease minus the margin, 200ms + 0.1% of the lease
                               (default 10s, or that when less: 9.78s with a 20s lease,
                               2.295s with 5s)
    --fence-lifetime DUR       how long NAME's fencing counter lives at least after this
                               run's token (default 24h): how far the server's clock may
                               be set back without repeating a token
    --url, --prefix, --timeout see "redislock --help"

EXIT STATUS
    COMMAND's status; 75 (or --conflict-exit-code) not obtained; 76 lease lost, or renewals
    unconfirmed until it could run out (COMMAND was stopped, --on-lost term or kill); 126
    COMMAND not executable; 127 COMMAND not found; 2 bad usage (a --kill-after that does not
    fit in the lease too); 69 Redis unreachable or refused.

EXAMPLES
    # crontab: run the report on one host of the fleet; the others skip quietly
    */10 * * * * REDISLOCK_URL=redis://redis.internal:6379 redislock run --no-wait --conflict-exit-code 0 report -- /opt/report.sh

    # wait at most two minutes, fence the writes with the token
    redislock run --wait 2m --lease 1m migrate -- sh -c 'migrate --fence "$REDISLOCK_FENCING_TOKEN"'

    # several readers at once, and a writer that excludes them
    redislock run --shared catalog -- ./read-catalog.sh
    redislock run --write catalog -- ./rebuild-catalog.sh

    # at most 4 encoders at once across the fleet
    redislock run --permits 4 encoders -- ./encode.sh
)";
}

inline const char* elect_help() {
  return R"(NAME
    redislock elect - run a command while leading an election

SYNOPSIS
    redislock elect [OPTIONS] NAME [--value V] -- COMMAND [ARGS...]

DESCRIPTION
    Campaigns for leadership of the election NAME (redislock::election: one leader per NAME
    at a time), waits until it leads, then runs COMMAND while it leads, and resigns when
    COMMAND exits: the longest waiting "redislock elect" of NAME (or program using the
    library) leads next, at once. Leadership is a lease renewed in the background, exactly
    like the lock of "redislock run": everything "redislock run --help" says about waiting,
    signals, the lease and losing it applies (COMMAND is stopped when leadership is lost).

    V (default "<host name>:<pid>") is what every observer reads as the leader's value
    (redislock::election::leader()), e.g. the address where the leader serves.

    COMMAND gets in its environment:
      REDISLOCK_NAME            NAME
      REDISLOCK_FENCING_TOKEN   the leader's term: higher for every new leader of NAME. Pass
                                it with every write, and have the storage refuse a term
                                lower than one it has seen
      REDISLOCK_LEASE_MS        the lease in milliseconds

OPTIONS
    --value V                  the leader's value (before or after NAME)
    --wait DUR, --no-wait, --conflict-exit-code N, --lease DUR, --on-lost term|kill|ignore,
    --kill-after DUR, --fence-lifetime DUR
                               as for "redislock run" (not leading counts as not obtained)
    --url, --prefix, --timeout see "redislock --help"

EXIT STATUS
    As "redislock run": COMMAND's status; 75 (or --conflict-exit-code) another leads (with
    --no-wait, or when --wait ran out); 76 leadership lost while COMMAND ran; 126, 127; 2 bad
    usage; 69 Redis unreachable or refused (NAME used by another kind of lock).

EXAMPLES
    # one scheduler in the fleet; the others wait to take over
    redislock elect --lease 10s scheduler --value "$(hostname):8080" -- ./scheduler

    # try once; exit quietly when another host leads
    redislock elect --no-wait --conflict-exit-code 0 compactor -- ./compact.sh
)";
}

inline const char* status_help() {
  return R"(NAME
    redislock status - show the state of locks

SYNOPSIS
    redislock status [--json] [--watch [--interval DUR] [--count N]] [OPTIONS] NAME...

DESCRIPTION
    For each NAME, whatever kind of lock it is (mutex, reentrant, shared, semaphore): free or
    held, the holders (mutex: the owner token "<object id>:<acquisition>"; reentrant: owner and
    hold count; shared: the writer and each reader with its count; semaphore: each permit's
    token, and the permit count), each hold's remaining lease,
    the waiters queued on the server (every kind queues them), whether a writer waits
    (shared), and the last fencing token given out. Reads one
    consistent snapshot per lock with a read-only script (for a free name, one per kind: the
    waiters of every kind's queue are added up); changes nothing.

OPTIONS
    --json      print a JSON array with one object per NAME:
                {"name", "key", "kind" ("none", "mutex", "reentrant", "shared", "semaphore",
                 "foreign"),
                 "held", "ttl_ms" (-2 no key, -1 no expiry), "last_fencing_token",
                 "waiters" (live places in the kind's queue; free name: in every kind's),
                 "writer_waiting_ms", "permits" (semaphore: N; else 0),
                 "holders": [{"owner", "object", "role", "count", "remaining_ms"}]}
    --watch     refresh the view every --interval until Ctrl-C (or --count refreshes); each
                refresh starts with a line "--- <UTC time> (refresh N, ...) ---" (on a
                terminal the screen is cleared first). A refresh that fails (Redis
                unreachable during a failover) prints "error: ..." and the view goes on.
    --interval DUR  time between refreshes, from 100ms to 1h (default 1s)
    --count N   end after N refreshes (for scripts and tests)
    --url, --prefix, --timeout  see "redislock --help"

EXIT STATUS
    0 every NAME is held; 1 at least one is free or not a lock; 2 bad usage; 69 Redis
    unreachable or refused. With --watch: 0 when it ends (Ctrl-C or --count).

EXAMPLES
    redislock status nightly-report
    redislock status --json backup | jq '.[0].holders'
    if redislock status backup >/dev/null; then echo "backup running"; fi
)";
}

inline const char* top_help() {
  return R"(NAME
    redislock top - the busiest lock names under a prefix

SYNOPSIS
    redislock top [--limit N] [--scan-count N] [--max-keys N]
                  [--watch [--interval DUR] [--count N]] [OPTIONS] [PREFIX]

DESCRIPTION
    Finds the names starting with PREFIX (all names without it) that are held or have
    waiters, and lists the busiest first (most waiters, then most holders) with their kind,
    holders, waiters and the least lease left among their holders.

    The keys are found with SCAN ... MATCH <key prefix>{PREFIX* COUNT --scan-count, never
    KEYS: each SCAN call does a bounded amount of work on the server, and the whole scan stops
    after --max-keys keys (the last line then says "partial"). Each name found is read like
    "redislock status" reads it (one read-only script, 1 to 3 round trips). On a cluster
    (redis-cluster:// URL) every master is scanned. Safe against a production server; on a
    keyspace with millions of keys, narrow PREFIX or lower --max-keys.

OPTIONS
    --limit N       rows shown (default 20)
    --scan-count N  SCAN's COUNT hint, keys per call (default 200, at most 10000)
    --max-keys N    stop after examining N keys over all nodes (default 10000)
    --watch, --interval DUR, --count N  refresh as "redislock status --watch" does
    --url, --prefix, --timeout  see "redislock --help"

OUTPUT
    NAME  KIND  HOLDERS  WAITERS  LEASE LEFT
    then a last line: <B> busy of <N> names; <K> keys examined on <M> nodes, and whether the
    scan was complete or stopped at --max-keys (partial).

EXIT STATUS
    0 the table was printed (also when nothing is busy); 2 bad usage; 69 Redis unreachable
    or refused.

EXAMPLES
    redislock top order:
    redislock top --watch --interval 5s --limit 10
)";
}

inline const char* break_help() {
  return R"(NAME
    redislock break - force-release a lock (administrator action)

SYNOPSIS
    redislock break [--yes] [OPTIONS] NAME

DESCRIPTION
    Removes every hold of NAME, whoever holds it, prints what it removed, and lets the lock
    move on at once: a mutex or reentrant lock is handed to its longest waiting live waiter and
    a shared lock to the head of its queue (a writer, or the readers up to the first writer),
    a semaphore's freed permits to its longest waiting live waiters, as a release would. The fencing counter is kept,
    so the next holder's token is higher than the removed holder's, and storage that checks
    tokens rejects the removed holder's late writes. A holder using "redislock run" notices at
    its next renewal (within a third of its lease) and stops its command (--on-lost).

    Use it for a holder that is stuck but alive (a crashed one needs nothing: its lease runs
    out). When stdin is a terminal, --yes is required.

OPTIONS
    --yes       confirm
    --url, --prefix, --timeout  see "redislock --help"

EXIT STATUS
    0 a hold was removed; 1 NAME was free (nothing removed) or is not a lock; 2 bad usage or
    no --yes on a terminal; 69 Redis unreachable or refused.

EXAMPLES
    redislock break --yes nightly-report
    redislock status nightly-report && redislock break --yes nightly-report
)";
}

}  // namespace redislock_cli
