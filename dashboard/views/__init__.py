"""The dashboard's pages and actions. Every queryset a page shows goes through
`capvco_web.permissions.visible`; an action is offered where `allowed` says so, and done
through the service, which checks the role again."""
