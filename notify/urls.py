from django.urls import path

from notify import views

app_name = "notify"

urlpatterns = [
    path("", views.target_list, name="targets"),
    path("<int:pk>/test/", views.target_test, name="target-test"),
    path("tests/<int:pk>/", views.test_result, name="test-result"),
]
