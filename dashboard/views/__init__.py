"""The dashboard's pages and actions. Every queryset a page shows goes through
`access.visible`, every action through `access.may`."""
