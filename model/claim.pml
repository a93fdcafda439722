/*
 * The claim session of dedupe-proxy, as the code implements it, for one
 * message key (keys are independent: every step below touches one key).
 *
 * Two replicas take deliveries of the key from a broker that redelivers
 * whatever is not acked (after a requeue or a crash) and may deliver a
 * duplicate at any time. Each replica claims the key in the seen-set with
 * a lease, forwards it to the app holding the claim (renewing it every
 * lease/3), and decides from the answer: commit and ack a success, release
 * after a failure the app answered, keep the claim for one more lease when
 * the request may still be running at the app.
 *
 * Time is a clock of ticks; a tick is a third of the shortest interval
 * that matters (with L = 3 a renewal is due every tick, as lease/3 is).
 * A replica's own steps take no time (the clock waits for them); time
 * passes only while a replica waits: for a delivery, for the app, for a
 * backoff, or for a kept claim to run out.
 *
 * Faults, each bounded by a budget (a -D define):
 *   CRASHES    a replica dies at any step (SIGKILL): its delivery goes back
 *              to the broker, its renewals stop, the app goes on with its
 *              request and its answer goes nowhere;
 *   ERRS       a seen-set call fails: not applied, or applied with the
 *              answer lost (a timeout, or WAIT short of wait_replicas);
 *   APPFAILS   the app answers 5xx (no effect);
 *   HANGS      the app keeps a request past app.max_request_time (otherwise
 *              it answers by then);
 *   DUPS       the broker delivers a duplicate;
 *   FAILOVER   the seen-set's master dies and its replica takes over with
 *              what was replicated (which lags by less than a tick, or by
 *              any time with REPLICA_CUTOFF); WAIT_REPLICAS makes claims
 *              and commits answer only once the replica has them
 *              (wait_replicas: 1); renewals and releases are not waited for;
 *   CONNBREAK  the connection breaks after the request was written.
 *
 * The app is naive (it counts effects) and, in the same run, records what
 * an app that honours Idempotency-Key would have done; it may take longer
 * than app.timeout, the lease and app.max_request_time, and it finishes its
 * work even after the caller gave up on it.
 *
 * BROKEN_RELEASE_ON_TIMEOUT is the code before this month: a request
 * without an answer within app.timeout was given up and its claim
 * released. BROKEN_COMMIT_FIRST marks the key done before forwarding it.
 * BROKEN_AUTO_ACK acks a delivery on receipt, so a crash loses it. Each
 * must produce a counterexample.
 *
 * TRANSITIONS: every step of the model, and the code that implements it
 * (package.Function or package.Type.Method; "env" for what the world
 * does). model/table_test.go checks that every function named here exists, and
 * that every step of internal/claim is named here.
 *
 *   T_DELIVER       pipeline.Pipeline.handle pipeline.work.run pipeline.Pipeline.handleBatch webhook.Handler.ServeHTTP
 *   T_NOT_BEFORE    pipeline.work.acquire claim.Session.NotBefore
 *   T_TOKEN         claim.Protocol.Begin claim.Session.nextToken
 *   T_CLAIM         claim.Session.Take claim.Protocol.claim seenset.Store.Claim claim.Batch.Take seenset.ClaimMany webhook.Handler.store
 *   T_CLAIM_RETRY   claim.Session.claim pipeline.work.ClaimFailed pipeline.work.Wait
 *   T_DUP_ACK       pipeline.work.loop pipeline.Pipeline.batchItem pipeline.work.ack webhook.Handler.store
 *   T_BUSY_WAIT     pipeline.work.loop pipeline.work.park pipeline.work.waitBusy claim.Session.Close
 *   T_AHEAD         pipeline.Pipeline.batchItem pipeline.work.useAhead claim.Session.UseAhead claim.Session.Ahead
 *   T_FORWARD       pipeline.work.forward webhook.Handler.forward forward.Client.Do
 *   T_HOLD          claim.Session.Hold claim.Protocol.hold
 *   T_RENEW         claim.Hold.tick claim.Session.UseAhead seenset.Store.Renew
 *   T_RENEW_LOST    claim.Hold.tick claim.Session.UseAhead pipeline.work.LeaseLost claim.LostFunc.LeaseLost
 *   T_ANSWER        forward.Client.Do forward.Client.classify
 *   T_ABANDON       forward.Client.do forward.failure
 *   T_TIMEOUT       forward.Client.Do
 *   T_CONNBREAK     forward.Client.do
 *   T_HOLD_STOP     claim.Protocol.hold claim.Hold.Stop
 *   T_DECIDE        claim.Decide claim.Session.Forwarded pipeline.work.settle webhook.Handler.settle
 *   T_COMMIT        claim.Session.Succeeded claim.Protocol.commit seenset.Store.Commit claim.Batch.commit seenset.CommitMany
 *   T_ACK           pipeline.work.Committed pipeline.work.ack webhook.Handler.answer webhook.Handler.enqueue
 *   T_RELEASE       claim.Session.LetGo claim.Session.LetGoPrior claim.Protocol.release seenset.Store.Release pipeline.work.letGo webhook.Handler.letGo webhook.Handler.enqueue
 *   T_KEEP          claim.Session.keep claim.Protocol.keep seenset.Store.Renew
 *   T_RETRY         pipeline.work.settle pipeline.work.Wait
 *   T_REQUEUE       webhook.Handler.refuse webhook.Handler.answer
 *   T_CRASH         env claim.Session.GiveBack pipeline.work.recoverPanic
 *   T_DUPLICATE     env
 *   T_TICK          env
 *   T_EXPIRE        env
 *   T_REPLICATE     env
 *   T_FAILOVER      env
 *   T_APP_WORK      env
 *   T_APP_FAIL      env
 *   T_APP_ANSWER    env
 *
 * The batch path's own step (T_AHEAD) is taken with -DAHEAD; the webhook
 * handler's answer that sends a request back to its sender (T_REQUEUE)
 * with -DWEBHOOK.
 *
 * ACTIONS: what T_DECIDE may decide (claim.Action).
 *
 *   A_COMMIT        claim.Commit
 *   A_RELEASE       claim.Release
 *   A_KEEP          claim.Keep
 *
 * NOT MODELLED: exported parts of internal/claim that are no step of a
 * key's session.
 *
 *   claim.New                 construction
 *   claim.Protocol.Observe    a user's view of the protocol, for its store state log
 *   claim.Protocol.Lease      accessor
 *   claim.Protocol.NewBatch   construction
 *   claim.Batch.Join          a session joining its batch's commits (no store call)
 *   claim.Batch.Wait          ordering within a batch (a replica here takes one message at a time)
 *   claim.Session.Begun       accessor
 *   claim.Session.Active      accessor
 *   claim.Session.Key         accessor
 *   claim.Session.Digest      accessor
 *   claim.Session.Reused      accessor
 *   claim.Session.KeptHere    what this process kept, for the busy delay and the log
 *   claim.Session.TakenHere   what this process holds, for the lost-lease log
 *   claim.Session.StoredDigest  a read for the key-reuse log line
 *   claim.Session.FailOpen    on_store_error: forward, which takes the key out of the seen-set (no claim at all)
 *   claim.Session.Reuse       the key a reused body (key_reuse: forward) is claimed under: another key, the same protocol
 *   claim.ReuseKey            the same
 *   claim.LogLevel            logging
 *   claim.StoreState.StoreCall  logging of the store's state
 */

/* ---- parameters (ticks and budgets) ---- */
#ifndef L
#define L 3          /* seenset.lease */
#endif
#ifndef M
#define M 3          /* app.max_request_time */
#endif
#ifndef T
#define T 1          /* app.timeout */
#endif
#ifndef OVERLAP_MIN
#define OVERLAP_MIN M  /* STRICT_OVERLAP: the age another open request must have */
#endif
#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef ERRS
#define ERRS 1
#endif
#ifndef APPFAILS
#define APPFAILS 1
#endif
#ifndef HANGS
#define HANGS 1      /* requests the app keeps past app.max_request_time */
#endif
#ifndef DUPS
#define DUPS 1
#endif
#ifndef CONNBREAKS
#ifdef CONNBREAK
#define CONNBREAKS 1
#else
#define CONNBREAKS 0
#endif
#endif
#ifdef FAILOVER
#define FAILOVERS 1
#else
#define FAILOVERS 0
#endif

#define NR 2         /* replicas */
#define NS 3         /* request slots at the app */
#define NONE 255     /* no token */

mtype = {
	T_DELIVER, T_NOT_BEFORE, T_TOKEN, T_CLAIM, T_CLAIM_RETRY, T_DUP_ACK,
	T_BUSY_WAIT, T_FORWARD, T_HOLD, T_RENEW, T_RENEW_LOST, T_ANSWER,
	T_ABANDON, T_TIMEOUT, T_CONNBREAK, T_HOLD_STOP, T_DECIDE, T_COMMIT,
	T_ACK, T_RELEASE, T_KEEP, T_RETRY, T_CRASH, T_DUPLICATE, T_TICK,
	T_EXPIRE, T_REPLICATE, T_FAILOVER, T_APP_WORK, T_APP_FAIL, T_APP_ANSWER,
	T_AHEAD, T_REQUEUE,
	A_COMMIT, A_RELEASE, A_KEEP
};

/* Every step prints itself, so that spin -t shows a trail in these words. */
#define STEP(t)  printf("R%d %e\n", r, t)
#define ENV(t)   printf("env %e\n", t)

/* ---- the seen-set: the master, and the replica a failover promotes ---- */
#define ABSENT   0
#define INFLIGHT 1
#define DONE     2
byte m_st, m_own = NONE, m_lease;
#ifdef FAILOVER
byte r_st, r_own = NONE, r_lease;
#endif

/* store call outcomes */
#define OK       0
#define ERR      1   /* ErrUnavailable: applied or not, unknown */
#define NOTOWNER 2
#define CLAIMED  3
#define DUP      4
#define BUSY     5

/* ---- the broker ---- */
byte queued = 1;       /* deliveries waiting (the message, then redeliveries) */
bool held[NR];         /* the replica has a delivery */

/* ---- the app: one slot per request open at it ---- */
bool s_open[NS], s_worked[NS], s_listen[NS];
byte s_r[NS], s_tok[NS], s_age[NS], s_why[NS];
byte reply[NR];        /* answer delivered to the replica waiting on its slot */
#define NOANS 0
#define ANS2XX 1
#define ANS5XX 2

/* why a request may be open at the app without the claim that covered it
 * (s_why), and what made a naive app act twice (causes) */
#define W_CRASH      1   /* its replica crashed before the commit */
#define W_COMMITERR  2   /* the commit failed after the 2xx (then acked anyway) */
#define W_LOSTDONE   4   /* a failover lost the done mark */
#define W_LOSTCLAIM  8   /* a failover lost the claim while the request ran */
#define W_LEASE     16   /* renewals failed until the lease ran out */
#define W_PASTBOUND 32   /* given up at app.max_request_time */
#define W_CONNBREAK 64   /* the connection broke; kept for one lease only */
byte causes;

/* ---- ghosts ---- */
byte naive;            /* effects of a naive app (2: twice or more) */
bool recorded;         /* an honouring app recorded the key with its work */
byte honour;           /* effects of an honouring app */

/* ---- budgets and clock state ---- */
byte crashes, errs, appfails, dups, connbreaks, failovers, hangs;
bool crashing[NR];
bool waiting[NR];      /* the replica waits (time may pass) */
bool bwait[NR];        /* a busy key's wait: ends at the next tick */
bool holding[NR];      /* Hold is renewing its claim */
bool renewdue[NR];     /* a renewal is due (lease/3 elapsed) */
byte nb[NR];           /* ticks until notBefore (a kept claim ran out) */
byte cur[NR] = NONE;   /* the slot of the request the replica waits for */
bool window[NR];       /* a request went out and its outcome is not yet committed */
bool kept[NR];         /* the last request may still run: keep, not release */
byte unclaimed[NR];    /* a failover lost the claim before its request went out */
byte tk[NR] = NONE;    /* the token the replica's claim is under */
#ifdef AHEAD
bool ahead[NR];        /* waits with a claim its batch took ahead (time passes, no renewal) */
bool aold[NR];         /* a tick passed since: older than a third of a lease */
#endif

/* no loss: an ack only after the work was done (an honouring app's record) */
#define ACKED_ONLY_EFFECTED assert(recorded)

/* ---- store calls (each one atomic, as a Redis command or script is) ---- */

inline do_claim(tok, res) {
	if
	:: m_st == ABSENT || (m_st == INFLIGHT && m_own == tok) ->
		m_st = INFLIGHT; m_own = tok; m_lease = L; res = CLAIMED
	:: m_st == DONE -> res = DUP
	:: else -> res = BUSY
	fi
}

inline do_commit(tok, res) {
	if
	:: m_st != ABSENT && m_own != tok -> res = NOTOWNER
	:: else -> res = OK
	fi;
	m_st = DONE; m_own = tok; m_lease = 0
}

inline do_renew(tok, res) {
	if
	:: m_st == INFLIGHT && m_own == tok -> m_lease = L; res = OK
	:: else -> res = NOTOWNER
	fi
}

inline do_release(tok, res) {
	if
	:: m_st == ABSENT -> res = OK
	:: m_st == INFLIGHT && m_own == tok -> m_st = ABSENT; m_own = NONE; m_lease = 0; res = OK
	:: else -> res = NOTOWNER
	fi
}

#ifdef FAILOVER
inline replicate() { r_st = m_st; r_own = m_own; r_lease = m_lease }
#endif

/* A write that WAIT covers (claim, commit): with wait_replicas its success
 * means the replica has it. */
#if defined(FAILOVER) && defined(WAIT_REPLICAS)
#define WAITED replicate()
#else
#define WAITED skip
#endif

/* call(op): ok, or (budget allowing) failed before or after it applied. */
#define CALL(op, tok, res, waited) \
	if \
	:: do_##op(tok, res); waited \
	:: errs < ERRS -> errs++; res = ERR \
	:: errs < ERRS -> errs++; do_##op(tok, res); res = ERR \
	fi

/* NewToken: a token nothing refers to any more is as good as a new one
 * (so tokens are numbered from 0 up, the smallest free one first). */
#ifdef FAILOVER
#define REFERS(t) (m_own == t || r_own == t || tk[0] == t || tk[1] == t || \
	(s_open[0] && s_tok[0] == t) || (s_open[1] && s_tok[1] == t) || (s_open[2] && s_tok[2] == t))
#else
#define REFERS(t) (m_own == t || tk[0] == t || tk[1] == t || \
	(s_open[0] && s_tok[0] == t) || (s_open[1] && s_tok[1] == t) || (s_open[2] && s_tok[2] == t))
#endif
inline new_token() {
	i = 0;
	do
	:: REFERS(i) -> i++
	:: else -> break
	od;
	tk[r] = i;
	unclaimed[r] = 0;
	i = 0
}

inline open_request(tok) {
	/* never two requests open at the app at once, unless the other one is
	 * past app.max_request_time or the model names why its claim ended */
	i = 0;
	do
	:: i < NS ->
		if
		:: s_open[i] ->
#ifdef STRICT_OVERLAP
			/* only past the documented bound, whatever happened */
			printf("overlap: the other request is %d ticks old, why %d\n", s_age[i], s_why[i]);
			assert(s_age[i] >= OVERLAP_MIN);
#else
			assert(s_why[i] != 0 || unclaimed[r] != 0);
#endif
		:: else
		fi;
		i++
	:: else -> break
	od;
	i = 0;
	do
	:: i < NS && s_open[i] -> i++
	:: i < NS && !s_open[i] -> break
	:: else -> assert(false) /* NS too small */
	od;
	s_open[i] = true; s_worked[i] = false; s_listen[i] = true;
	s_r[i] = r; s_tok[i] = tok; s_age[i] = 0; s_why[i] = unclaimed[r];
	slot = i;
	i = 0
}

/* ---- a replica ---- */

/* AHEAD: the first claim of each delivery is its batch's (claim.Batch.Take).
 * WEBHOOK: a replica is the webhook handler, a delivery the sender's
 * request: every answer but a 2xx sends it back to the sender, who retries
 * (REQUEUE), instead of a retry in place; a request the app has not
 * answered within app.timeout is answered so while the forward goes on
 * with the claim held. */
#ifdef WEBHOOK
#define REQUEUE atomic { held[r] -> held[r] = false; queued++; STEP(T_REQUEUE) }; goto next
#endif
#ifdef AHEAD
#define TAKEN batched = first; first = false
#else
#define TAKEN skip
#endif

proctype Replica(byte r) {
	byte res, slot, i, ans;
	mtype act;
#ifdef AHEAD
	bool first, batched;
#endif
	do
	:: {
		waiting[r] = true;
		atomic { queued > 0 -> queued--; held[r] = true; waiting[r] = false; STEP(T_DELIVER) };
#ifdef AHEAD
		first = true;
#endif
acquire:
		if
		:: nb[r] > 0 ->
			waiting[r] = true;
			nb[r] == 0;
			atomic { waiting[r] = false; STEP(T_NOT_BEFORE) }
		:: else
		fi;
		atomic { new_token(); STEP(T_TOKEN) };
claim:
		atomic { CALL(claim, tk[r], res, WAITED); STEP(T_CLAIM); TAKEN };
		if
#ifdef WEBHOOK
		:: res == ERR || res == BUSY ->
			/* 503 or 409: the sender retries later */
			REQUEUE
#endif
		:: res == ERR ->
			/* fail closed: back off and claim again under the same token */
			waiting[r] = true;
			atomic { waiting[r] = false; STEP(T_CLAIM_RETRY) };
			goto claim
		:: res == DUP ->
			atomic { ACKED_ONLY_EFFECTED; held[r] = false; STEP(T_DUP_ACK) };
			goto next
		:: res == BUSY ->
			/* never requeued: the delivery stays held here and claims
			 * again (a new token) after time has passed (busy_delay) */
			bwait[r] = true;
			waiting[r] = true;
			atomic { !bwait[r] -> waiting[r] = false; STEP(T_BUSY_WAIT) };
			goto acquire
		:: res == CLAIMED
		fi;
#ifdef AHEAD
		if
		:: batched ->
			/* claimed ahead: the batch's earlier messages are forwarded
			 * first while the lease runs unrenewed; then UseAhead renews a
			 * claim older than a third of a lease, or the message takes
			 * the slow path: a new claim (lost) or one under the same
			 * token (the renewal's answer lost) */
			ahead[r] = true; aold[r] = false;
			waiting[r] = true;
			atomic { waiting[r] = false; ahead[r] = false; STEP(T_AHEAD) };
			if
#ifdef BROKEN_AHEAD_UNRENEWED
			:: false ->
#else
			:: aold[r] ->
#endif
				atomic {
					CALL(renew, tk[r], res, skip);
					if
					:: res == NOTOWNER -> STEP(T_RENEW_LOST)
					:: else -> STEP(T_RENEW)
					fi
				};
				if
				:: res == NOTOWNER -> goto acquire
				:: res == ERR -> goto claim
				:: else
				fi
			:: else
			fi
		:: else
		fi;
#endif
#ifdef BROKEN_COMMIT_FIRST
		atomic { CALL(commit, tk[r], res, WAITED); STEP(T_COMMIT) };
#endif
		atomic {
			open_request(tk[r]);
			window[r] = true; kept[r] = false;
			STEP(T_FORWARD);
			holding[r] = true; renewdue[r] = false; cur[r] = slot;
			STEP(T_HOLD);
			waiting[r] = true
		};
		do
		:: atomic { renewdue[r] ->
			waiting[r] = false;
			CALL(renew, tk[r], res, skip);
			renewdue[r] = false;
			if
			:: res == NOTOWNER -> holding[r] = false; STEP(T_RENEW_LOST)
			:: else -> STEP(T_RENEW)
			fi;
			waiting[r] = true }
		:: atomic { reply[r] != NOANS ->
			waiting[r] = false; ans = reply[r]; reply[r] = NOANS; STEP(T_ANSWER) };
			break
		:: atomic { s_listen[slot] && s_age[slot] >= M && hangs < HANGS ->
			hangs++;
			/* no answer within app.max_request_time: given up, may run on */
			waiting[r] = false; s_listen[slot] = false; s_why[slot] = s_why[slot] | W_PASTBOUND;
			causes = causes | W_PASTBOUND;
			ans = NOANS; kept[r] = true; STEP(T_ABANDON) };
			break
#ifdef BROKEN_RELEASE_ON_TIMEOUT
		:: atomic { s_listen[slot] && s_age[slot] >= T ->
			/* the old code: given up at app.timeout, as if it had failed */
			waiting[r] = false; s_listen[slot] = false;
			ans = ANS5XX; STEP(T_TIMEOUT) };
			break
#endif
#ifdef WEBHOOK
		:: atomic { s_listen[slot] && s_age[slot] >= T && held[r] ->
			/* app.timeout: the sender is answered 503 and retries; the
			 * request goes on at the app with the claim held */
			held[r] = false; queued++; STEP(T_REQUEUE) }
#endif
		:: atomic { s_listen[slot] && connbreaks < CONNBREAKS ->
			connbreaks++;
			waiting[r] = false; s_listen[slot] = false; s_why[slot] = s_why[slot] | W_CONNBREAK;
			causes = causes | W_CONNBREAK;
			ans = NOANS; kept[r] = true; STEP(T_CONNBREAK) };
			break
		od;
		atomic { holding[r] = false; renewdue[r] = false; cur[r] = NONE; STEP(T_HOLD_STOP) };
		atomic {
			if
			:: ans == ANS2XX -> act = A_COMMIT
			:: ans != ANS2XX && kept[r] -> act = A_KEEP
			:: else -> act = A_RELEASE
			fi;
			STEP(T_DECIDE); printf("R%d decides %e\n", r, act)
		};
		if
		:: act == A_COMMIT ->
			atomic {
				CALL(commit, tk[r], res, WAITED);
				if
				:: res == ERR -> causes = causes | W_COMMITERR
				:: else
				fi;
				window[r] = false;
				STEP(T_COMMIT)
			};
			/* acked whatever the commit answered: the app acted (a
			 * webhook's sender answered already is not answered again) */
			atomic { ACKED_ONLY_EFFECTED; if :: held[r] -> held[r] = false; STEP(T_ACK) :: else fi };
			goto next
		:: act == A_RELEASE ->
			atomic { CALL(release, tk[r], res, skip); window[r] = false; STEP(T_RELEASE) }
		:: act == A_KEEP ->
			atomic { CALL(renew, tk[r], res, skip); nb[r] = L; STEP(T_KEEP) }
		fi;
#ifdef WEBHOOK
		/* 502 or 503: the sender retries */
		nb[r] = 0;
		if
		:: held[r] -> REQUEUE
		:: else -> goto next
		fi;
#endif
		/* retry after a backoff, in place */
		waiting[r] = true;
		atomic { waiting[r] = false; STEP(T_RETRY) };
		goto acquire;
next:
		tk[r] = NONE
	   } unless { atomic { crashing[r] ->
		/* SIGKILL: the broker takes the delivery back; the app goes on */
		if
#ifdef BROKEN_AUTO_ACK
		:: held[r] -> held[r] = false  /* acked on receipt: gone */
#else
		:: held[r] -> held[r] = false; queued++
#endif
		:: else
		fi;
		if
		:: window[r] -> causes = causes | W_CRASH
		:: else
		fi;
		i = 0;
		do
		:: i < NS ->
			if
			:: s_open[i] && s_r[i] == r && (s_listen[i] || window[r]) ->
				s_listen[i] = false; s_why[i] = s_why[i] | W_CRASH
			:: else
			fi;
			i++
		:: else -> break
		od;
		i = 0;
		reply[r] = NOANS; tk[r] = NONE; unclaimed[r] = 0; holding[r] = false; renewdue[r] = false; cur[r] = NONE;
		nb[r] = 0; window[r] = false; kept[r] = false;
#ifdef AHEAD
		ahead[r] = false; aold[r] = false;
#endif
		waiting[r] = false; crashing[r] = false;
		STEP(T_CRASH) } }
	od
}

/* ---- the app: one process per request slot ---- */

#define CLOSE(i) s_open[i] = false; s_listen[i] = false; s_worked[i] = false; \
	s_r[i] = 0; s_tok[i] = 0; s_age[i] = 0; s_why[i] = 0

proctype App(byte i) {
	do
	:: atomic { s_open[i] && !s_worked[i] ->
		s_worked[i] = true;
		if
		:: naive < 2 -> naive++
		:: else
		fi;
		if
		:: naive >= 2 ->
			/* a naive app acts twice only for a reason the model names */
			printf("naive app acted twice; causes %d\n", causes);
			assert(causes != 0);
#ifdef NAIVE_ONCE
			/* to find what makes a naive app act twice, and show it */
			assert(false)
#endif
		:: else
		fi;
		if
		:: !recorded -> recorded = true; honour++
		:: else
		fi;
		ENV(T_APP_WORK) }
	:: atomic { s_open[i] && !s_worked[i] && appfails < APPFAILS ->
		appfails++;
		if
		:: s_listen[i] -> reply[s_r[i]] = ANS5XX
		:: else
		fi;
		CLOSE(i);
		ENV(T_APP_FAIL) }
	:: atomic { s_open[i] && s_worked[i] ->
		if
		:: s_listen[i] -> reply[s_r[i]] = ANS2XX
		:: else
		fi;
		CLOSE(i);
		ENV(T_APP_ANSWER) }
	od
}

/* ---- the world: the clock, the broker's duplicates, crashes, failover ---- */

/* The clock waits for every replica's own steps (no replica is between two
 * steps that take no time) and for renewals that are due. */
#ifdef BROKEN_RELEASE_ON_TIMEOUT
#define GIVEUP T
#else
#define GIVEUP M
#endif
#define IDLE(r) (waiting[r] && !renewdue[r] && !crashing[r] && reply[r] == NOANS && \
	!(cur[r] != NONE && s_listen[cur[r]] && s_age[cur[r]] >= GIVEUP))

inline expire_owner(tok) {
	/* a lease ran out under an open request: say why it has no claim now */
	i = 0;
	do
	:: i < NS ->
		if
		:: s_open[i] && s_tok[i] == tok && s_why[i] == 0 ->
			s_why[i] = W_LEASE; causes = causes | W_LEASE
		:: else
		fi;
		i++
	:: else -> break
	od;
	i = 0
}

/* Replication lags by less than a tick (a third of a lease), unless the
 * replica may be cut off (REPLICA_CUTOFF): then by any time. */
#if defined(FAILOVER) && !defined(REPLICA_CUTOFF)
#define REPLICATED (failovers == FAILOVERS || r_st == m_st && r_own == m_own && r_lease == m_lease)
#else
#define REPLICATED true
#endif

proctype World() {
	byte i;
	do
	:: atomic { IDLE(0) && IDLE(1) && REPLICATED ->
		ENV(T_TICK);
		i = 0;
		do
		:: i < NS ->
			if
			:: s_open[i] && s_age[i] <= M -> s_age[i]++
			:: else
			fi;
			i++
		:: else -> break
		od;
		i = 0;
		if
		:: m_st == INFLIGHT ->
			m_lease--;
			if
			:: m_lease == 0 ->
				ENV(T_EXPIRE);
				expire_owner(m_own);
				m_st = ABSENT; m_own = NONE
			:: else
			fi
		:: else
		fi;
#ifdef FAILOVER
		if
		:: r_st == INFLIGHT ->
			r_lease--;
			if
			:: r_lease == 0 -> r_st = ABSENT; r_own = NONE
			:: else
			fi
		:: else
		fi;
#endif
		if :: nb[0] > 0 -> nb[0]-- :: else fi;
		if :: nb[1] > 0 -> nb[1]-- :: else fi;
		bwait[0] = false; bwait[1] = false;
#ifdef AHEAD
		aold[0] = aold[0] || ahead[0];
		aold[1] = aold[1] || ahead[1];
#endif
		renewdue[0] = holding[0];
		renewdue[1] = holding[1] }
	:: atomic { dups < DUPS -> dups++; queued++; ENV(T_DUPLICATE) }
	:: atomic { crashes < CRASHES && held[0] && !crashing[0] -> crashes++; crashing[0] = true }
	:: atomic { crashes < CRASHES && held[1] && !crashing[1] -> crashes++; crashing[1] = true }
#ifdef FAILOVER
	:: atomic { failovers < FAILOVERS && (r_st != m_st || r_own != m_own || r_lease != m_lease) ->
		replicate(); ENV(T_REPLICATE) }
	:: atomic { failovers < FAILOVERS ->
		failovers++;
		if
		:: m_st == DONE && r_st != DONE -> causes = causes | W_LOSTDONE
		:: else
		fi;
		if
		:: m_st == INFLIGHT && !(r_st == INFLIGHT && r_own == m_own) ->
			causes = causes | W_LOSTCLAIM;
			i = 0;
			do
			:: i < NS ->
				if
				:: s_open[i] && s_tok[i] == m_own -> s_why[i] = s_why[i] | W_LOSTCLAIM
				:: else
				fi;
				i++
			:: else -> break
			od;
			i = 0;
			if
			:: tk[0] == m_own -> unclaimed[0] = W_LOSTCLAIM
			:: tk[1] == m_own -> unclaimed[1] = W_LOSTCLAIM
			:: else
			fi
		:: else
		fi;
		m_st = r_st; m_own = r_own; m_lease = r_lease;
		ENV(T_FAILOVER) }
#endif
	od
}

init {
	atomic {
		run World();
		run App(0); run App(1); run App(2);
		run Replica(0); run Replica(1)
	}
}

/* ---- properties ---- */

/* every delivery settled, and the work done: nothing waits at the broker,
 * no replica holds a delivery */
#ifdef LIVENESS
#define SETTLED (queued == 0 && !held[0] && !held[1] && recorded)

/* every message is eventually effected and every delivery acked */
ltl eventually_effected { <> [] SETTLED }
#endif
