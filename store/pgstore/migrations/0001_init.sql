-- The counters, leases and reservations of store/pgstore, and the functions
-- that admit, settle and sweep in one round trip each.
--
-- Keys: rule is the sluice.CounterKey.Rule fingerprint reinterpreted as a
-- signed bigint; subject is compared byte by byte (COLLATE "C"), which is
-- also the order the Go code sorts keys in, so that every transaction locks
-- counter rows in one global order (rule, subject, period) and none can
-- deadlock another.
--
-- Times are Unix nanoseconds. The functions take p_now: NULL means the
-- database clock (clock_timestamp(), read after the rows are locked), a value
-- means the caller's pinned clock (tests only).

CREATE TABLE sluice_counters (
	rule       bigint NOT NULL,
	subject    text   COLLATE "C" NOT NULL,
	period     bigint NOT NULL,
	-- Rate: GCRA theoretical arrival time of the next unit, tat ns plus
	-- frac/limit ns (0 <= frac < limit), exact like store/memstore.
	tat        bigint NOT NULL DEFAULT 0,
	frac       bigint NOT NULL DEFAULT 0,
	-- Budget: settled usage, open reservations, end of the period.
	used       bigint NOT NULL DEFAULT 0,
	reserved   bigint NOT NULL DEFAULT 0,
	period_end bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (rule, subject, period)
) WITH (fillfactor = 70); -- room on the page for HOT updates

-- Concurrency leases: one row per admitted batch and key. Expired leases
-- count for nothing and are deleted by the next admission on their key or by
-- the sweep.
CREATE TABLE sluice_leases (
	rule     bigint NOT NULL,
	subject  text   COLLATE "C" NOT NULL,
	period   bigint NOT NULL,
	batch_id bigint NOT NULL,
	expiry   bigint NOT NULL,
	PRIMARY KEY (rule, subject, period, batch_id)
);
CREATE INDEX sluice_leases_expiry ON sluice_leases (expiry);

-- Open reservations: one row per admitted batch with a budget charge, with
-- what settling it at expiry needs: its budget charges (kind 2) and leases
-- (kind 3), in key order. Settle and Sweep delete the row, so whichever
-- comes first settles the batch and the other finds nothing.
CREATE TABLE sluice_reservations (
	batch_id   bigint   PRIMARY KEY,
	deadline   bigint   NOT NULL,
	kind       smallint[] NOT NULL,
	rule       bigint[] NOT NULL,
	subject    text[]   COLLATE "C" NOT NULL,
	period     bigint[] NOT NULL,
	amount     bigint[] NOT NULL,
	period_end bigint[] NOT NULL,
	release    boolean[] NOT NULL
);
CREATE INDEX sluice_reservations_deadline ON sluice_reservations (deadline);

-- sluice_now returns the database clock in Unix nanoseconds (microsecond
-- resolution).
CREATE FUNCTION sluice_now() RETURNS bigint LANGUAGE sql VOLATILE AS $$
	SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint
$$;

-- sluice_lock locks the counter row of a key, creating it if missing. A row
-- deleted between the two statements (the sweep drops idle counters) is
-- simply created again.
CREATE FUNCTION sluice_lock(p_rule bigint, p_subject text, p_period bigint, OUT tat bigint, OUT frac bigint,
	OUT used bigint, OUT reserved bigint)
LANGUAGE plpgsql AS $$
BEGIN
	LOOP
		SELECT c.tat, c.frac, c.used, c.reserved INTO tat, frac, used, reserved
		FROM sluice_counters c
		WHERE c.rule = p_rule AND c.subject = p_subject AND c.period = p_period
		FOR UPDATE;
		IF FOUND THEN
			RETURN;
		END IF;
		INSERT INTO sluice_counters (rule, subject, period) VALUES (p_rule, p_subject, p_period)
		ON CONFLICT DO NOTHING;
	END LOOP;
END
$$;

-- sluice_rate_adjust moves a bucket by p_delta units after settlement: a
-- refund gives room back (never more than a full bucket), an overrun draws
-- it into debt bounded by one burst. It is memstore's bucket.adjust.
CREATE FUNCTION sluice_rate_adjust(p_tat bigint, p_frac bigint, p_limit bigint, p_burst bigint, p_window bigint,
	p_delta bigint, p_now bigint, OUT tat bigint, OUT frac bigint)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	x    numeric;
	q    numeric;
	cap2 numeric;
BEGIN
	tat := p_tat;
	frac := p_frac;
	IF p_delta = 0 THEN
		RETURN;
	END IF;
	IF frac >= p_limit THEN -- the limit changed under this counter
		tat := tat + frac / p_limit;
		frac := frac % p_limit;
	END IF;
	IF tat < p_now THEN
		tat := p_now;
		frac := 0;
	END IF;
	IF p_delta > 0 THEN
		x := p_delta::numeric * p_window + frac;
		q := div(x, p_limit);
		cap2 := 2 * p_burst::numeric * p_window;
		IF q > 4611686018427387904 OR (tat + q - p_now) * p_limit + mod(x, p_limit) > cap2 THEN
			q := div(cap2, p_limit);
			IF q > 4611686018427387904 THEN
				tat := p_now;
				frac := 0;
			ELSE
				tat := p_now + q;
				frac := mod(cap2, p_limit);
			END IF;
		ELSE
			tat := tat + q;
			frac := mod(x, p_limit);
		END IF;
		RETURN;
	END IF;
	x := (-p_delta)::numeric * p_window;
	q := div(x, p_limit);
	IF q > 4611686018427387904 THEN
		tat := p_now;
		frac := 0;
		RETURN;
	END IF;
	tat := tat - q;
	frac := frac - mod(x, p_limit);
	IF frac < 0 THEN
		frac := frac + p_limit;
		tat := tat - 1;
	END IF;
	IF tat < p_now THEN
		tat := p_now;
		frac := 0;
	END IF;
END
$$;

-- sluice_admit evaluates a batch of charges (arrays, one element per charge,
-- sorted by key) and, when every charge that is not shadow fits, applies all
-- of them in the same transaction; otherwise none. With p_peek it only
-- evaluates, at an amount of zero, without locking or writing. Kinds: 1 rate,
-- 2 budget, 3 concurrency. The arithmetic is memstore's (counter.go), exact:
-- products of nanoseconds and limits are numeric, never rounded.
CREATE FUNCTION sluice_admit(
	p_now bigint, p_peek boolean, p_batch bigint, p_ttl bigint,
	p_kind smallint[], p_rule bigint[], p_subject text[], p_period bigint[],
	p_limit bigint[], p_burst bigint[], p_window bigint[], p_period_end bigint[],
	p_amount bigint[], p_shadow boolean[], p_release boolean[],
	OUT admitted boolean, OUT allowed boolean[], OUT remaining bigint[], OUT used bigint[],
	OUT retry_after bigint[], OUT reset_at bigint[])
LANGUAGE plpgsql AS $$
DECLARE
	n          int := coalesce(array_length(p_kind, 1), 0);
	now_ns     bigint;
	st         record;
	tats       bigint[] := array_fill(0::bigint, ARRAY[n]);
	fracs      bigint[] := array_fill(0::bigint, ARRAY[n]);
	useds      bigint[] := array_fill(0::bigint, ARRAY[n]);
	reserveds  bigint[] := array_fill(0::bigint, ARRAY[n]);
	new_tat    bigint[] := array_fill(0::bigint, ARRAY[n]);
	new_frac   bigint[] := array_fill(0::bigint, ARRAY[n]);
	amt        bigint;
	lim        bigint;
	t          bigint;
	f          bigint;
	nt         bigint;
	nf         bigint;
	cap        numeric;
	drawn_before     numeric;
	drawn_after      numeric;
	x          numeric;
	q          numeric;
	ok         boolean;
	in_use     bigint;
	held       bigint;
	earliest   bigint;
	has_budget boolean := false;
BEGIN
	allowed := array_fill(false, ARRAY[n]);
	remaining := array_fill(0::bigint, ARRAY[n]);
	used := array_fill(0::bigint, ARRAY[n]);
	retry_after := array_fill(0::bigint, ARRAY[n]);
	reset_at := array_fill(0::bigint, ARRAY[n]);
	admitted := true;

	-- Lock every counter first, in the caller's key order.
	FOR i IN 1..n LOOP
		IF p_peek THEN
			SELECT c.tat, c.frac, c.used, c.reserved INTO st
			FROM sluice_counters c
			WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
		ELSE
			SELECT * INTO st FROM sluice_lock(p_rule[i], p_subject[i], p_period[i]);
		END IF;
		IF st.tat IS NOT NULL THEN
			tats[i] := st.tat;
			fracs[i] := st.frac;
			useds[i] := st.used;
			reserveds[i] := st.reserved;
		END IF;
	END LOOP;
	now_ns := coalesce(p_now, sluice_now());

	FOR i IN 1..n LOOP
		amt := CASE WHEN p_peek THEN 0 ELSE p_amount[i] END;
		lim := p_limit[i];
		CASE p_kind[i]
		WHEN 1 THEN -- rate: memstore bucket.check
			t := tats[i];
			f := fracs[i];
			IF f >= lim THEN
				t := t + f / lim;
				f := f % lim;
			END IF;
			IF t < now_ns THEN
				t := now_ns;
				f := 0;
			END IF;
			cap := p_burst[i]::numeric * p_window[i];
			drawn_before := (t - now_ns)::numeric * lim + f;
			x := amt::numeric * p_window[i] + f;
			q := div(x, lim);
			ok := q <= 4611686018427387904;
			IF ok THEN
				nt := t + q::bigint;
				nf := mod(x, lim);
				drawn_after := (nt - now_ns)::numeric * lim + nf;
			END IF;
			IF ok AND drawn_after <= cap THEN
				allowed[i] := true;
				remaining[i] := div(cap - drawn_after, p_window[i]);
				reset_at[i] := nt + (nf > 0)::int;
				new_tat[i] := nt;
				new_frac[i] := nf;
			ELSE
				remaining[i] := CASE WHEN drawn_before > cap THEN 0 ELSE div(cap - drawn_before, p_window[i]) END;
				reset_at[i] := t + (f > 0)::int;
				IF ok THEN
					retry_after[i] := div(drawn_after - cap, lim) + (mod(drawn_after - cap, lim) > 0)::int;
				ELSE
					retry_after[i] := 4611686018427387904;
				END IF;
			END IF;
			used[i] := p_burst[i] - remaining[i];
		WHEN 2 THEN -- budget: a spent budget refuses even a charge of zero
			in_use := useds[i] + reserveds[i];
			allowed[i] := in_use + amt <= lim AND (amt > 0 OR in_use < lim);
			IF allowed[i] THEN
				in_use := in_use + amt;
			END IF;
			used[i] := in_use;
			remaining[i] := greatest(0, lim - in_use);
			reset_at[i] := p_period_end[i];
		WHEN 3 THEN -- concurrency: expired leases are pruned, then counted
			IF NOT p_peek THEN
				DELETE FROM sluice_leases l
				WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry <= now_ns;
			END IF;
			SELECT count(*), min(l.expiry) INTO held, earliest
			FROM sluice_leases l
			WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.expiry > now_ns;
			allowed[i] := held < lim;
			IF allowed[i] AND NOT p_peek THEN
				held := held + 1;
			END IF;
			used[i] := held;
			remaining[i] := greatest(0, lim - held);
			IF earliest IS NOT NULL THEN
				reset_at[i] := earliest;
				IF NOT allowed[i] THEN
					retry_after[i] := earliest - now_ns;
				END IF;
			END IF;
		END CASE;
		IF NOT allowed[i] AND NOT p_shadow[i] THEN
			admitted := false;
		END IF;
	END LOOP;
	IF p_peek OR NOT admitted THEN
		RETURN;
	END IF;

	FOR i IN 1..n LOOP
		CASE p_kind[i]
		WHEN 1 THEN
			IF allowed[i] THEN
				nt := new_tat[i];
				nf := new_frac[i];
			ELSE -- a shadow charge over its limit: draw it like an overrun
				SELECT a.tat, a.frac INTO nt, nf
				FROM sluice_rate_adjust(tats[i], fracs[i], p_limit[i], p_burst[i], p_window[i], p_amount[i], now_ns) a;
			END IF;
			UPDATE sluice_counters c SET tat = nt, frac = nf
			WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
		WHEN 2 THEN
			UPDATE sluice_counters c SET reserved = c.reserved + p_amount[i], period_end = p_period_end[i]
			WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
			has_budget := true;
		WHEN 3 THEN
			INSERT INTO sluice_leases (rule, subject, period, batch_id, expiry)
			VALUES (p_rule[i], p_subject[i], p_period[i], p_batch, now_ns + p_ttl)
			ON CONFLICT DO NOTHING;
		END CASE;
	END LOOP;
	IF has_budget THEN
		INSERT INTO sluice_reservations (batch_id, deadline, kind, rule, subject, period, amount, period_end, release)
		SELECT p_batch, now_ns + p_ttl, array_agg(p_kind[i] ORDER BY i), array_agg(p_rule[i] ORDER BY i),
			array_agg(p_subject[i] ORDER BY i), array_agg(p_period[i] ORDER BY i), array_agg(p_amount[i] ORDER BY i),
			array_agg(p_period_end[i] ORDER BY i), array_agg(p_release[i] ORDER BY i)
		FROM generate_series(1, n) i
		WHERE p_kind[i] IN (2, 3);
	END IF;
END
$$;

-- sluice_settle replaces a batch's charges by their actual amounts and frees
-- its leases. The caller sends only the charges with something to do (rates
-- whose actual differs, budgets, leases), sorted by key. A batch with a
-- budget charge is settled only if its reservation row is still there; the
-- function deletes it, so a second settle, or one after the sweep, returns
-- false and changes nothing.
CREATE FUNCTION sluice_settle(
	p_now bigint, p_batch bigint,
	p_kind smallint[], p_rule bigint[], p_subject text[], p_period bigint[],
	p_limit bigint[], p_burst bigint[], p_window bigint[], p_period_end bigint[],
	p_amount bigint[], p_actual bigint[])
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	n      int := coalesce(array_length(p_kind, 1), 0);
	now_ns bigint;
	st     record;
	tats   bigint[] := array_fill(0::bigint, ARRAY[n]);
	fracs  bigint[] := array_fill(0::bigint, ARRAY[n]);
	nt     bigint;
	nf     bigint;
BEGIN
	IF 2 = ANY(p_kind) THEN
		DELETE FROM sluice_reservations WHERE batch_id = p_batch;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
	END IF;
	FOR i IN 1..n LOOP
		SELECT * INTO st FROM sluice_lock(p_rule[i], p_subject[i], p_period[i]);
		tats[i] := st.tat;
		fracs[i] := st.frac;
	END LOOP;
	now_ns := coalesce(p_now, sluice_now());
	FOR i IN 1..n LOOP
		CASE p_kind[i]
		WHEN 1 THEN
			SELECT a.tat, a.frac INTO nt, nf
			FROM sluice_rate_adjust(tats[i], fracs[i], p_limit[i], p_burst[i], p_window[i], p_actual[i] - p_amount[i], now_ns) a;
			UPDATE sluice_counters c SET tat = nt, frac = nf
			WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
		WHEN 2 THEN
			UPDATE sluice_counters c
			SET reserved = greatest(0, c.reserved - p_amount[i]), used = c.used + p_actual[i], period_end = p_period_end[i]
			WHERE c.rule = p_rule[i] AND c.subject = p_subject[i] AND c.period = p_period[i];
		WHEN 3 THEN
			DELETE FROM sluice_leases l
			WHERE l.rule = p_rule[i] AND l.subject = p_subject[i] AND l.period = p_period[i] AND l.batch_id = p_batch;
		END CASE;
	END LOOP;
	RETURN true;
END
$$;

-- sluice_sweep settles up to p_max reservations past their deadline: leases
-- are freed, budget charges charged their amount or refunded (release).
-- FOR UPDATE SKIP LOCKED lets several replicas sweep at once: each row is
-- taken by one sweeper, and a row being settled by Settle is skipped (and
-- deleted by it). The counters of every reservation taken are locked
-- together in key order.
CREATE FUNCTION sluice_sweep(p_now bigint, p_max int,
	OUT reservations int, OUT charged int, OUT released int)
LANGUAGE plpgsql AS $$
DECLARE
	now_ns bigint := coalesce(p_now, sluice_now());
	ids    bigint[];
	k      record;
BEGIN
	SELECT coalesce(array_agg(r.batch_id), '{}') INTO ids
	FROM (SELECT batch_id FROM sluice_reservations WHERE deadline <= now_ns
		ORDER BY deadline LIMIT p_max FOR UPDATE SKIP LOCKED) r;
	reservations := coalesce(array_length(ids, 1), 0);
	charged := 0;
	released := 0;
	IF reservations = 0 THEN
		RETURN;
	END IF;
	FOR k IN
		SELECT DISTINCT c.rule, c.subject COLLATE "C" AS subject, c.period
		FROM sluice_reservations r, unnest(r.rule, r.subject, r.period) AS c(rule, subject, period)
		WHERE r.batch_id = ANY(ids)
		ORDER BY 1, 2, 3
	LOOP
		PERFORM sluice_lock(k.rule, k.subject, k.period);
	END LOOP;
	UPDATE sluice_counters c
	SET reserved = greatest(0, c.reserved - s.amount), used = c.used + s.charge, period_end = s.period_end
	FROM (
		SELECT x.rule, x.subject, x.period, sum(x.amount) AS amount,
			sum(CASE WHEN x.release THEN 0 ELSE x.amount END) AS charge, max(x.period_end) AS period_end
		FROM sluice_reservations r,
			unnest(r.kind, r.rule, r.subject, r.period, r.amount, r.period_end, r.release)
				AS x(kind, rule, subject, period, amount, period_end, release)
		WHERE r.batch_id = ANY(ids) AND x.kind = 2
		GROUP BY x.rule, x.subject, x.period
	) s
	WHERE c.rule = s.rule AND c.subject = s.subject AND c.period = s.period;
	DELETE FROM sluice_leases l
	USING sluice_reservations r, unnest(r.kind, r.rule, r.subject, r.period) AS x(kind, rule, subject, period)
	WHERE r.batch_id = ANY(ids) AND x.kind = 3
		AND l.rule = x.rule AND l.subject = x.subject AND l.period = x.period AND l.batch_id = r.batch_id;
	SELECT count(*) FILTER (WHERE NOT x.release), count(*) FILTER (WHERE x.release) INTO charged, released
	FROM sluice_reservations r, unnest(r.kind, r.release) AS x(kind, release)
	WHERE r.batch_id = ANY(ids) AND x.kind = 2;
	DELETE FROM sluice_reservations WHERE batch_id = ANY(ids);
END
$$;

-- sluice_cleanup deletes up to p_max expired leases and idle counters (a
-- full bucket, no open reservation, no usage in a live period), skipping any
-- row another transaction holds, so it never waits and never blocks an
-- admission for long. A counter row holds nothing an absent row does not.
CREATE FUNCTION sluice_cleanup(p_now bigint, p_max int, OUT leases int, OUT counters int)
LANGUAGE plpgsql AS $$
DECLARE
	now_ns bigint := coalesce(p_now, sluice_now());
BEGIN
	WITH gone AS (
		SELECT rule, subject, period, batch_id FROM sluice_leases WHERE expiry <= now_ns
		LIMIT p_max FOR UPDATE SKIP LOCKED
	)
	DELETE FROM sluice_leases l USING gone
	WHERE l.rule = gone.rule AND l.subject = gone.subject AND l.period = gone.period AND l.batch_id = gone.batch_id;
	GET DIAGNOSTICS leases = ROW_COUNT;
	WITH idle AS (
		SELECT rule, subject, period FROM sluice_counters
		WHERE tat <= now_ns AND reserved = 0 AND (used = 0 OR period_end <= now_ns)
			AND NOT EXISTS (SELECT 1 FROM sluice_leases l WHERE l.rule = sluice_counters.rule
				AND l.subject = sluice_counters.subject AND l.period = sluice_counters.period AND l.expiry > now_ns)
		LIMIT p_max FOR UPDATE SKIP LOCKED
	)
	DELETE FROM sluice_counters c USING idle
	WHERE c.rule = idle.rule AND c.subject = idle.subject AND c.period = idle.period;
	GET DIAGNOSTICS counters = ROW_COUNT;
END
$$;
