module sundial.dev/hack/robfig

go 1.26

require github.com/robfig/cron/v3 v3.0.1
