-- sluice_sweep can tell what it settled: with p_report, swept holds each
-- reservation it settled (its charges' kinds, keys, amounts and expiry
-- policies, as admitted), so that a ledger can record what the sweep
-- charged. Without it (the previous callers' two arguments) it does what it
-- did and swept is NULL (or [] when nothing was due); its work is otherwise the same, statement for
-- statement, as 0003's (budget sums saturating at 2^53).
DROP FUNCTION sluice_sweep(bigint, int);

CREATE FUNCTION sluice_sweep(p_now bigint, p_max int, p_report boolean DEFAULT false,
	OUT reservations int, OUT charged int, OUT released int, OUT swept jsonb)
LANGUAGE plpgsql AS $$
DECLARE
	now_ns bigint := coalesce(p_now, sluice_now());
	ids    bigint[];
BEGIN
	SELECT coalesce(array_agg(r.batch_id), '{}') INTO ids
	FROM (SELECT batch_id FROM sluice_reservations WHERE deadline <= now_ns
		ORDER BY deadline LIMIT p_max FOR UPDATE SKIP LOCKED) r;
	reservations := coalesce(array_length(ids, 1), 0);
	charged := 0;
	released := 0;
	IF reservations = 0 THEN
		swept := '[]';
		RETURN;
	END IF;
	INSERT INTO sluice_counters AS c (rule, subject, period)
	SELECT DISTINCT x.rule, x.subject COLLATE "C", x.period
	FROM sluice_reservations r, unnest(r.kind, r.rule, r.subject, r.period) AS x(kind, rule, subject, period)
	WHERE r.batch_id = ANY(ids) AND x.kind IN (2, 3)
	ORDER BY 1, 2, 3
	ON CONFLICT (rule, subject, period) DO UPDATE SET tat = c.tat WHERE false;
	UPDATE sluice_counters c
	SET reserved = greatest(0, c.reserved - s.amount), used = least(c.used + s.charge, 9007199254740992), period_end = s.period_end,
		touched = now_ns
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
	IF p_report THEN
		SELECT coalesce(jsonb_agg(jsonb_build_object('kind', r.kind, 'rule', r.rule, 'subject', r.subject,
			'period', r.period, 'amount', r.amount, 'release', r.release)), '[]') INTO swept
		FROM sluice_reservations r WHERE r.batch_id = ANY(ids);
	END IF;
	DELETE FROM sluice_reservations WHERE batch_id = ANY(ids);
END
$$;
