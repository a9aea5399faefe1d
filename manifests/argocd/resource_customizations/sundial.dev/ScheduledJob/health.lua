-- Argo CD health of a Sundial ScheduledJob (sundial.dev/v1alpha1), read from the status
-- Sundial writes. It runs with or without Lua's standard libraries (an argocd-cm
-- customization has none unless useOpenLibs is set), so it uses only table, ipairs,
-- tostring and the .. operator.
--
-- Progressing  Sundial has not yet acted on this generation, cannot tell (Ready Unknown:
--              a backend unreachable), or is switching backends. A sync waits; it never
--              fails on a status older than the change it applied.
-- Degraded     Ready False: the spec, or the backend's verdict on it, is refused. The
--              reason and Sundial's message say what to fix.
-- Healthy      the backend is in step with the spec. Suspended, paused, missed, failing
--              and overlong runs are in the message but leave the status Healthy: a run is
--              the job's news, not the deployment's, so a failed nightly run does not fail
--              `argocd app sync && argocd app wait` (Argo CD issue 25551). Alert on runs
--              with Sundial's metrics, or set failingRunsDegrade to true to make
--              RunsFailing Degraded. Suspended is Healthy too, as for Argo CD's CronJob:
--              one Suspended resource would make the whole Application Suspended; so are a
--              maintenance window (spec.suspendUntil) and a pause by the failure policy
--              (Ready PausedByFailurePolicy, first in the message; with
--              failingRunsDegrade, Degraded, as its RunsFailing is True).
local failingRunsDegrade = false

local function findCondition(status, kind)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function said(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

local function isTrue(c)
  return c ~= nil and c.status == "True"
end

local function health(o)
  local status = o.status
  local generation = o.metadata.generation
  if status == nil or status.observedGeneration == nil then
    return "Progressing", "Waiting for Sundial to reconcile the ScheduledJob"
  end
  if generation ~= nil and status.observedGeneration < generation then
    return "Progressing", "Waiting for Sundial to reconcile generation " .. tostring(generation)
      .. " (status is of generation " .. tostring(status.observedGeneration) .. ")"
  end
  local ready = findCondition(status, "Ready")
  if ready == nil then
    return "Progressing", "Waiting for Sundial's Ready condition"
  end
  if ready.status == "False" then
    return "Degraded", said(ready)
  end
  if ready.status ~= "True" then
    return "Progressing", said(ready)
  end
  local switching = findCondition(status, "Switching")
  if isTrue(switching) then
    return "Progressing", said(switching)
  end

  local parts = {}
  if o.spec ~= nil and o.spec.suspend == true then
    local note = o.spec.suspendNote
    if note ~= nil and note ~= "" then
      table.insert(parts, "Suspended: " .. note)
    else
      table.insert(parts, "Suspended")
    end
  elseif status.pause ~= nil and status.pause.reason == "MaintenanceWindow" then
    -- "until" is a Lua keyword: the field is read by its name as a string.
    local line = "Suspended until " .. tostring(status.pause["until"])
    local note = o.spec and o.spec.suspendNote
    if note ~= nil and note ~= "" then
      line = line .. ": " .. note
    end
    table.insert(parts, line)
  elseif ready.reason ~= "Reconciled" then
    -- PausedByFailurePolicy among them: which run tripped it, and how to resume.
    table.insert(parts, said(ready))
  end
  local failing = findCondition(status, "RunsFailing")
  for _, kind in ipairs({"RunsFailing", "RunsMissed", "RunTooLong"}) do
    local c = findCondition(status, kind)
    if isTrue(c) then
      if c.message ~= nil and c.message ~= "" then
        table.insert(parts, kind .. ": " .. c.message)
      else
        table.insert(parts, kind .. ": " .. c.reason)
      end
    end
  end
  if #parts == 0 then
    local backend = status.backend or "kubernetes"
    local line = "In step on backend " .. backend
    if status.nextRunTimes ~= nil and status.nextRunTimes[1] ~= nil then
      line = line .. "; next run " .. status.nextRunTimes[1]
    end
    if status.lastResult ~= nil then
      line = line .. "; last run " .. status.lastResult
    end
    table.insert(parts, line)
  end
  if failingRunsDegrade and isTrue(failing) then
    return "Degraded", table.concat(parts, "; ")
  end
  return "Healthy", table.concat(parts, "; ")
end

local hs = {}
hs.status, hs.message = health(obj)

-- Being deleted: Argo CD shows deletionMessage (with this status) instead of its default
-- "Pending deletion". Only a temporal-backed object waits, on Sundial deleting its schedule.
if obj.metadata.deletionTimestamp ~= nil and obj.metadata.finalizers ~= nil then
  for _, f in ipairs(obj.metadata.finalizers) do
    if f == "sundial.dev/temporal-schedule" then
      local line = "Pending deletion: Sundial is deleting the Temporal schedule"
      local ref = obj.status and obj.status.backendRef
      if ref ~= nil and ref.scheduleId ~= nil then
        line = line .. " " .. ref.scheduleId
      end
      local ready = findCondition(obj.status, "Ready")
      if ready ~= nil and ready.status ~= "True" then
        line = line .. " (" .. said(ready) .. ")"
      end
      hs.status = "Progressing"
      hs.deletionMessage = line
    end
  end
end
return hs
